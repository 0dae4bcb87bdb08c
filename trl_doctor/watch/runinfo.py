"""One run of several in a store or folder (a tracker's store, TensorBoard's runs/): how the watch names it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    """One run in a store: how people name it, the tracker's id, when it started (seconds; 0 unknown), and whether
    the tracker says it ended (None where it does not say)."""

    name: str
    id: str
    started: float = 0.0
    ended: bool | None = None

    def label(self) -> str:
        """How the watch prints the run: its name (and id), as one line with no control character and no workflow
        command of the store's (a run's name is anyone's text)."""
        from trl_doctor.report.formats._safe import no_commands, visible

        text = self.name if self.name == self.id or not self.id else f"{self.name} ({self.id})"
        return no_commands(visible(text[:200], one_line=True))
