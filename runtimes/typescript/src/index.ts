/** The routeforge bundle runtime in TypeScript (docs/bundle-format.md). */
export { Bundle } from "./bundle";
export { SentenceEncoder } from "./encoder";
export { HeuristicPolicy, knownHeuristics, recommend, registerHeuristic } from "./heuristics";
export { LatencyModel, TreeEnsemble } from "./latency";
export { bestIndex, Router, textKey } from "./router";
export { readSafetensors } from "./safetensors";
export { dynamoKv, llmD, llmDAffinity, llmDTtft, lmetric, pickAmong, sglangCacheAware } from "./deployed_routers";
export { BlockLru, GlobalLruIndex, PrefixIndex, TtlIndex } from "./prefix_index";
export { OBSERVED, RouterView } from "./observation";
