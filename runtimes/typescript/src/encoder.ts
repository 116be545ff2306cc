/**
 * The bundle's sentence encoder: tokenizer.json through tokenizers.js, model.onnx through ONNX
 * Runtime. Truncation is done here as the Python runtime's `tokenizers` does it: the text's own
 * tokens are cut to `max_length` minus the special tokens the post-processor adds, on the side the
 * router was trained with, and the special tokens are added back around what is left.
 */
import { readFileSync } from "fs";
import { join } from "path";
import { Tokenizer } from "@huggingface/tokenizers";
import * as ort from "onnxruntime-node";

export class SentenceEncoder {
  private constructor(
    readonly spec: any,
    private readonly tokenizer: Tokenizer,
    private readonly session: ort.InferenceSession,
    private readonly template: [number, number],
  ) {}

  static async load(folder: string): Promise<SentenceEncoder> {
    const spec = JSON.parse(readFileSync(join(folder, "encoder.json"), "utf8"));
    const tokenizer = new Tokenizer(
      JSON.parse(readFileSync(join(folder, "tokenizer.json"), "utf8")),
      JSON.parse(readFileSync(join(folder, "tokenizer_config.json"), "utf8")),
    );
    const tokenizerJson = JSON.parse(readFileSync(join(folder, "tokenizer.json"), "utf8"));
    const session = await ort.InferenceSession.create(join(folder, "model.onnx"), {
      executionProviders: ["cpu"],
      graphOptimizationLevel: "all",
    });
    return new SentenceEncoder(spec, tokenizer, session, specialTokens(tokenizerJson.post_processor));
  }

  get dim(): number {
    return Number(this.spec.dim);
  }

  /** Token ids of one text, truncated to `max_length` on `side`, special tokens included. */
  tokenize(text: string, side: "left" | "right"): number[] {
    const plain = this.tokenizer.encode(text, { add_special_tokens: false }).ids;
    const full = this.tokenizer.encode(text, { add_special_tokens: true }).ids;
    // the post-processor's template around the text: full = prefix + plain + suffix
    const [prefix, suffix] = this.template;
    if (full.length !== prefix + plain.length + suffix) {
      throw new Error(`tokenizer: ${full.length} ids with special tokens, ${plain.length} without: not the template`);
    }
    const room = Number(this.spec.max_length) - prefix - suffix;
    const kept = plain.length <= room ? plain : side === "left" ? plain.slice(plain.length - room) : plain.slice(0, room);
    return [...full.slice(0, prefix), ...kept, ...full.slice(full.length - suffix)];
  }

  /** L2-normalised embeddings (the pooling and normalisation are inside the graph), one text at a time. */
  async encode(texts: string[], side: "left" | "right"): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    for (const text of texts) {
      const ids = this.tokenize(text, side);
      const shape = [1, ids.length];
      const feeds = {
        input_ids: new ort.Tensor("int64", BigInt64Array.from(ids, (v) => BigInt(v)), shape),
        attention_mask: new ort.Tensor("int64", new BigInt64Array(ids.length).fill(1n), shape),
      };
      const result = await this.session.run(feeds);
      out.push(Float32Array.from(result[this.spec.output ?? "embedding"].data as Float32Array));
    }
    return out;
  }
}

/** (special tokens before, after) the text in a single-sequence encoding, from the post-processor. */
function specialTokens(processor: any): [number, number] {
  if (processor == null) return [0, 0];
  if (processor.type === "BertProcessing" || processor.type === "RobertaProcessing") return [1, 1];
  if (processor.type === "TemplateProcessing") {
    const single: any[] = processor.single;
    const at = single.findIndex((piece) => "Sequence" in piece);
    return [at, single.length - at - 1];
  }
  throw new Error(`tokenizer post-processor ${processor.type} is not supported`);
}
