"""Dashboards (installed as ``rlscope.dashboards``): the Dash app and its figure builders.

Nothing here is imported by ``import rlscope``; the dashboard's dependencies are an extra.
"""

__all__: list[str] = []
