"""The analyzer contract, its registry (entry points) and `analyze`."""

from interpret.analysis.contract import Analyzer, RunContext
from interpret.analysis.params import ParamInfo, describe
from interpret.analysis.result import AnalyzerResult, Check, HeadMap, NamedArray, Readout, View
from interpret.analysis.run import analyze, analyzers, required_names
from interpret.registration.analyzer_rules import GROUP

__all__ = [
    "GROUP",
    "Analyzer",
    "AnalyzerResult",
    "Check",
    "HeadMap",
    "NamedArray",
    "ParamInfo",
    "Readout",
    "RunContext",
    "View",
    "analyze",
    "analyzers",
    "describe",
    "required_names",
]
