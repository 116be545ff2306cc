"""LLM-Inference-Bench importer: coarse E2E priors per tier, bad rows named."""

import pytest
from routeforge.profiling.coarse_priors import import_coarse_priors, read_llm_inference_bench


def test_imports_every_fittable_tier_and_says_why_others_are_not(shared_data):
    path = shared_data / "profiles" / "llm_inference_bench_results.csv"
    priors, skipped = import_coarse_priors(path)
    assert len(priors) + len(skipped) == len(read_llm_inference_bench(path))
    assert len(priors) > 200 and all(reason for reason in skipped.values())
    p = priors["mistralai/Mistral-7B-v0.1@Nvidia GH200 GPUx1@TensorRT-LLM"]
    # E2E at batch 1 grows by ~5.8 ms per input+output token on a GH200 (0.69 s at 128, 11.7 s at 2048)
    assert 0.005 < p.tpot_s < 0.0065 and p.r2_batch1 > 0.999
    assert p.batch_for_theta == 64 and p.epsilon > 1 and p.theta_tok_s > 1000
    assert all(pr.tpot_s > 0 for pr in priors.values())


def test_a_malformed_row_is_named(tmp_path):
    path = tmp_path / "bench.csv"
    path.write_text("Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput\n"
                    "A100,1,vLLM,m,128,1,0.5,100\nA100,1,vLLM,m,256,one,0.9,100\n")
    with pytest.raises(ValueError, match=r"bench.csv:3: not an LLM-Inference-Bench row"):
        read_llm_inference_bench(path)
