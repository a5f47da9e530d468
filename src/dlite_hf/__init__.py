"""dlite-hf: DLite history-free speculative decoding for transformers.

Importing the package registers the ``"dlite"`` model type with ``AutoConfig`` / ``AutoModel`` and patches nothing:
the ``generate()`` integration (``modeling/integration.py``) is installed when a drafter is first created or loaded.
"""

from transformers import AutoConfig, AutoModel

from .defaults import resolve_dtype
from .modeling.candidate_generators import DLiteCandidateGenerator, DLiteGenerationStats, HybridCandidateGenerator
from .modeling.configuration_dlite import DLiteConfig
from .modeling.integration import install_generate_hook
from .modeling.modeling_dlite import DLiteForSpeculation, DLiteOutput, DLitePreTrainedModel
from .modeling.packed_linear import pack_linears
from .modeling.suffix_index import DraftSession

__version__ = "0.1.0"

AutoConfig.register(DLiteConfig.model_type, DLiteConfig, exist_ok=True)
AutoModel.register(DLiteConfig, DLiteForSpeculation, exist_ok=True)

_LAZY = {"DLiteTrainer": "dlite_hf.training.trainer", "DLiteTrainingArguments": "dlite_hf.training.arguments"}

__all__ = [
    "DLiteCandidateGenerator",
    "DLiteConfig",
    "DLiteForSpeculation",
    "DLiteGenerationStats",
    "HybridCandidateGenerator",
    "DLiteOutput",
    "DLitePreTrainedModel",
    "DraftSession",
    "__version__",
    "install_generate_hook",
    "pack_linears",
    "resolve_dtype",
    *_LAZY,
]


_LAZY_MODULES = ("attention", "neartie")  # `dlite_hf.attention.register()` works after a bare `import dlite_hf`


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _LAZY_MODULES:
        return importlib.import_module(f"dlite_hf.{name}")
    raise AttributeError(f"module 'dlite_hf' has no attribute {name!r}")
