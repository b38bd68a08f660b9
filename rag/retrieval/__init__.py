"""Retrieval: documents and chunking (``documents``), the embedder (``embed``), the persisted index
(``index``: FAISS in ``faiss_store``, BM25 in ``lexical``, rank fusion in ``fusion``, title links
in ``title_links``; its records in ``records``), named collections (``collection``) and the
retriever the pipeline's retrieve stage searches through (``retriever``)."""
