"""The analyzer contract, its registry (entry points) and `analyze`."""

from interpret.analyze.contract import Analyzer, RunContext
from interpret.analyze.params import ParamInfo, describe
from interpret.analyze.result import AnalyzerResult, Check, HeadMap, NamedArray, Readout, View
from interpret.analyze.run import analyze, analyzers, required_names
from interpret.analyzer_rules import GROUP

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
