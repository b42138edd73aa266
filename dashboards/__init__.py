"""Dashboards (installed as ``rlscope.dashboards``): the live Dash app and its figure builders.

``app.create_app`` builds the Dash Pages app that ``rlscope dashboard`` serves; ``live`` keeps
one incrementally refreshed view per run directory; ``figures`` turns frames into plotly
figures (pure, tested on the sample traces); ``pages`` holds one module per page. Nothing
here is imported by ``import rlscope``: dash and plotly come with the ``dashboard`` extra.
"""

__all__: list[str] = []
