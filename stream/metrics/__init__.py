"""Every Prometheus metric the worker exports, built in one place with one prefix.

``ScorerMetrics`` is the observer the worker hands to its engine, judge, thread and delivery
code: each callback updates the metrics it concerns. Its registry can be injected (like
Faust's ``PrometheusMonitor``); the worker uses ``ScorerMetrics.default()``, on
prometheus_client's global registry, which its /metrics page serves.

Labels come from a small closed set (rule, pack, criterion, scope, model, status, outcome,
topic, reason, kind, type, a comparison's variant_a, variant_b and preferred, project,
bounded by ``ProjectLabels``, a tool call's tool, bounded by ``ToolLabels``, and the judge's
account, a hash of its endpoint and key); never
trace, thread or score ids, never a key. The Grafana dashboards and the Prometheus rules in ``grafana/`` are written
against these names.
"""

from .callbacks import ScorerMetrics
from .low import is_low
from .page import sample_value
from .projects import OTHER, ProjectLabels
from .tools import ToolLabels

__all__ = ["OTHER", "ProjectLabels", "ScorerMetrics", "ToolLabels", "is_low", "sample_value"]
