"""Operating a deployed router: a challenger judged on the traffic the fleet served (`replay`, with the
off-policy estimators of `off_policy`) from the logged requests as the router reads them (`traffic_prompts`)."""
