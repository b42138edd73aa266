"""One module per dashboard page; ``create_app`` imports them, each registers itself with Dash Pages.

Not imported on its own: ``dash.register_page`` needs the app to exist first.
"""

__all__: list[str] = []
