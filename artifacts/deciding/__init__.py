"""Deciding a request: the component kinds a bundle holds (`components`) and what they compute. The quality
router and its KNN estimator over the sentence encoder, the length and score predictors, the latency heads
per tier, the routing heuristics and today's deployed routers, learned policies and their observation, the
operator's budget and objectives, the recommendation per traffic, the golden vectors by which another
runtime proves it decides alike, and the `Dispatcher` that puts them together per request. Reads the
component folders it is handed; trusting and fetching them is `bundle`'s."""
