"""What else ran while a run was timed, as the record keeps it: a ``Contention`` entry per heavy
job of the app's own process (a label, no share), for the app's own page work in other threads of
its process (``Contention(APP_PAGES, share)``, in cores) or for other processes
(``Contention(OTHER_PROCESSES, share)``). ``specviz.models.busy`` measures them;
``describe`` says a list of them in a page's language (the labels are English data, the
templates in ``JOBS``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from specviz.record.i18n import N_, Translator, translate_known

OTHER_PROCESSES = "other processes"  # the label of the other-process entry (English: data)
APP_PAGES = "this app's pages"  # the label of the entry for the app's own page work (serving, other sessions)


# The heavy jobs that can overlap a run (the labels ``heavy`` is given, English) and the
# other-process entry, as a page says them.
JOBS = (N_("loading the {pair} pair ({dtype})"), N_("measuring forward-pass costs"),
        N_("quantizing the draft to int8"))
OTHERS_TEXT = N_("other programs ({cores} cores)")
APP_TEXT = N_("this app drawing its pages ({cores} cores)")


@dataclass(frozen=True)
class Contention:
    """Something that competed with a run's timed work: a heavy job in this process
    (``cpu_share`` None), the app's page work or other processes, with the cores they took on average."""

    label: str
    cpu_share: float | None = None

    def text(self, tr: Translator = N_) -> str:
        """In ``tr``'s language (default English, as the CLI prints it): "other programs
        (0.9 cores)", or the job's label."""
        if self.cpu_share is None:
            return translate_known(self.label, JOBS, tr)
        return tr(APP_TEXT if self.label == APP_PAGES else OTHERS_TEXT).format(cores=f"{self.cpu_share:.1f}")

    @classmethod
    def of(cls, value: "Contention | dict | str") -> "Contention":
        """An entry as found in a trace dict or a cached cost file (an older one wrote the label alone)."""
        if isinstance(value, Contention):
            return value
        if isinstance(value, str):
            return cls(value)
        return cls(value["label"], value.get("cpu_share"))


def describe(entries: Iterable[Contention], tr: Translator = N_) -> str:
    """Contention entries in ``tr``'s language, joined by "; " ("" when there are none)."""
    return "; ".join(c.text(tr) for c in entries)


def merged(entries: Iterable[Contention]) -> list[Contention]:
    """One entry per label, for many runs at once: a share (other processes, the app's pages) at the
    largest seen."""
    found: dict[str, Contention] = {}
    for c in entries:
        seen = found.get(c.label)
        if seen is None or (c.cpu_share or 0.0) > (seen.cpu_share or 0.0):
            found[c.label] = c
    return [found[k] for k in sorted(found)]
