"""Evidence that an explanation is right: faithfulness metrics of any readout, against random rankings.

`evaluate_evidence(trace, results, ctx)` returns an `Evidence` (ERASER comprehensiveness and sufficiency
with AOPC, MoRF/LeRF deletion curves and the area between them, the random baseline, rank agreement).
"""

from interpret.evidence.evidence import DEFAULT_SEEDS, Evidence, MethodEvidence, evaluate_evidence, evidence_or_reason
from interpret.evidence.metrics import BINS, FRACTIONS, RankingScores, score_rankings
from interpret.evidence.ranking import order_of
from interpret.evidence.removal import REMOVALS, RemovalScorer, candidates, default_removal

__all__ = [
    "BINS",
    "DEFAULT_SEEDS",
    "Evidence",
    "FRACTIONS",
    "MethodEvidence",
    "REMOVALS",
    "RankingScores",
    "RemovalScorer",
    "candidates",
    "default_removal",
    "evaluate_evidence",
    "evidence_or_reason",
    "order_of",
    "score_rankings",
]
