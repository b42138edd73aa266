"""Imported by verl before the hook (first in VERL_USE_EXTERNAL_MODULES): a verl without one patch target."""

import verl.utils.debug.metrics

del verl.utils.debug.metrics.calculate_debug_metrics
