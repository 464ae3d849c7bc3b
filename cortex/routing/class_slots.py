"""Which priority class may take a free slot of a model: what batch work
leaves to the classes above it (issues 26 and 30). Pure: admission
(`admission.py`) counts and asks.

Two rules, both about the batch class only (interactive and default take
any free slot, in the queue's order):

- the reserve: batch requests may not take a model's last
  `batch_reserved_slots` free slots per ready replica. A replica's engine
  runs what it was given: vLLM's scheduler does not preempt a running
  request for a higher-priority one on the count of sequences, so an
  interactive request arriving at replicas full of batch work would wait
  for a batch request to end (bench-fairness: 3× its unloaded TTFT). The
  reserve is there for it at once.
- the trickle: while requests of a higher class run or wait on the model,
  batch requests run at most `batch_trickle_slots` per ready replica. The
  engine shares its steps between whatever it runs (and does not interrupt
  a prefill for a higher class either), so every batch request beside
  interactive work adds to its latency (bench-batch: 1.5× its TTFT with 8
  lines in flight). With nothing above it on the model, batch fills the
  slots (less the reserve): it fills idle capacity.

One batch request may always run when a slot is free, whatever the rules
say: with a cap at or below the reserve, or under steady interactive load,
batch work must still move (slowly), not starve.
"""

from __future__ import annotations

from dataclasses import dataclass

from axon.priority import CLASSES, PriorityClass

# The class the rules hold back: the lowest.
BATCH: PriorityClass = CLASSES[-1]


@dataclass(frozen=True)
class ModelSlots:
    """What admission knows of one model now."""

    free: int | None  # slots free over its ready replicas, less those handed out; None: no cap
    replicas: int  # its ready replicas
    batch_running: int  # batch requests admitted and not ended
    others_busy: bool  # a request of a higher class runs or waits


@dataclass(frozen=True)
class BatchRules:
    reserved_slots: int  # per ready replica
    trickle_slots: int  # per ready replica


def may_take(cls: PriorityClass, slots: ModelSlots, rules: BatchRules) -> bool:
    """Whether a request of class `cls` may take a slot of the model now."""
    if slots.free is not None and slots.free <= 0:
        return False
    if cls != BATCH or slots.batch_running == 0:
        return True
    replicas = max(1, slots.replicas)
    if slots.free is not None and slots.free <= rules.reserved_slots * replicas:
        return False
    return not slots.others_busy or slots.batch_running < rules.trickle_slots * replicas
