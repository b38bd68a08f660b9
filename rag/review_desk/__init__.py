"""The reviewer desk's side in ``rag``: the review queue (``guards.review``) as the pipeline, the
HTTP routes and the CLI use it. Opened from the settings (``desk``), its items as people see them
(``views``), written out for a download (``export_format``: rows, JSON lines, CSV), and the risk
control per collection over its labels (``risk``)."""

from rag.review_desk.desk import ReviewDesk, index_version, load_gold_file, open_review_store
from rag.review_desk.export_format import export_rows, to_csv
from rag.review_desk.views import ReviewOut

__all__ = [
    "ReviewDesk",
    "ReviewOut",
    "export_rows",
    "index_version",
    "load_gold_file",
    "open_review_store",
    "to_csv",
]
