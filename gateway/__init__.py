"""`routeforge gateway`: an OpenAI-compatible HTTP router in front of real serving backends, deciding
each request with a verified bundle (its quality router for the model, its recommended routing policy
for the instance, through `routeforge.artifacts.deciding.dispatch.Dispatcher`) and logging every decision in the
traffic-log format that `routeforge bundle replay` and the outcome learning read.

Layer: above the runtime (`routeforge.artifacts`), below nothing of the training stack; installed with
`pip install 'routeforge[gateway]'` (aiohttp, prometheus-client).
"""
