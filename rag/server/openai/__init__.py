"""The OpenAI-compatible API, one module per part, calls pointing one way:

- ``routes``: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``; checks the request
  and hands it to one of the two models:
- ``grounded`` (the model ``ragguard``: the pipeline's answer) or ``raw`` (the loaded model:
  completions straight from the engine), which import neither each other nor the routes;
- below them ``reply`` (the response and chunk shapes both build), ``errors`` (OpenAI's error
  shape), ``logprobs``, and at the bottom ``sse`` and ``schemas``.

Admission, metrics and the client leaving are the server's (``rag.server.calls``), shared with
``/v1/ask``."""
