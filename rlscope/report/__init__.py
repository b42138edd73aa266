"""Reports of a diagnosis: the versioned JSON document (``document``), its text, Markdown and
HTML renderings (``text``, ``markdown``, ``html``), and two runs side by side (``compare``).

Each is imported from its module, so that a JSON report does not import the terminal's library."""
