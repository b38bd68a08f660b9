"""The OpenAI-compatible API's parts: request and response shapes (``schemas``), OpenAI's error
shape (``errors``), server-sent chunks (``sse``), raw generation straight from the engine
(``raw``) and grounded answers from the pipeline (``grounded``), and the routes (``routes``)."""
