"""Model facts: where a model reference resolves (a local folder or the hub cache, never a download) and how
many parameters a model holds."""

from __future__ import annotations

from .._config import resolve_artifact
from .._twin import parameter_count

__all__ = ["parameter_count", "resolve_artifact"]
