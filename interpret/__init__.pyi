# The public API of `interpret`, written once: type checkers read these imports, and `interpret/__init__.py`
# hands them to lazy_loader, which imports each name's module on first use.
from .analysis import AnalyzerResult as AnalyzerResult
from .analysis import analyze as analyze
from .analysis import analyzers as analyzers
from .api import explain as explain
from .api import load as load
from .capture import collect as collect
from .errors import AnalyzerError as AnalyzerError
from .errors import CaptureError as CaptureError
from .errors import ConfigError as ConfigError
from .errors import HookNameError as HookNameError
from .errors import InputError as InputError
from .errors import InterpretError as InterpretError
from .errors import MemoryBudgetError as MemoryBudgetError
from .errors import ModelLoadError as ModelLoadError
from .errors import ReportError as ReportError
from .errors import ResultError as ResultError
from .errors import UnsupportedModelError as UnsupportedModelError
from .inputs import Encoded as Encoded
from .inputs import encode as encode
from .report import Report as Report
from .request import EvidenceOptions as EvidenceOptions
from .request import Limits as Limits
from .request import Subject as Subject
from .request import View as View
from .target import Target as Target
from .trace import Trace as Trace
from .trace import TraceMeta as TraceMeta

__version__: str
