"""``python -m helpers [MODEL]``: prepare the chapter's model once (what ``make install`` runs).

Dequantizes the embedded GGUF (or the one ``MIC_MODEL`` names) to fp32 with a progress bar in the
terminal and caches it, so no notebook pays for the first load.
"""
import sys

from .infra.model import ModelNotAvailable, prepare

try:
    prepare(sys.argv[1] if len(sys.argv) > 1 else None)
except ModelNotAvailable as e:
    sys.exit(str(e))
