"""Reports of a diagnosis: the versioned JSON document and its text, Markdown and HTML renderings."""

from rlscope.report.document import SCHEMA, build_document
from rlscope.report.markdown import escape_md, render_markdown
from rlscope.report.text import render_text

__all__ = ["SCHEMA", "build_document", "escape_md", "render_markdown", "render_text"]
