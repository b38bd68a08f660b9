"""The review queue as ragguard uses it: opened from the settings (``desk``), its items as people
see them (``views``) and exported (``export``)."""

from rag.reviews.desk import ReviewDesk, index_version, load_gold_file, open_review_store
from rag.reviews.export import export_rows, to_csv
from rag.reviews.views import ReviewOut

__all__ = [
    "ReviewDesk",
    "ReviewOut",
    "export_rows",
    "index_version",
    "load_gold_file",
    "open_review_store",
    "to_csv",
]
