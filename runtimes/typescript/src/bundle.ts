/**
 * A verified bundle folder (docs/bundle-format.md, "verification"): the manifest's Ed25519
 * signature (`manifest.sig`) checked with the operator's public key, every file's size and SHA-256
 * checked against the manifest, nothing unlisted; then components by name.
 */
import { createHash, createPublicKey, verify } from "crypto";
import { existsSync, lstatSync, readdirSync, readFileSync, statSync } from "fs";
import { join, relative, sep } from "path";
import { SentenceEncoder } from "./encoder";
import { HeuristicPolicy } from "./heuristics";
import { LatencyModel } from "./latency";
import { Router } from "./router";

export const MANIFEST_SCHEMA_VERSION = 1;

function walk(folder: string): string[] {
  return readdirSync(folder).flatMap((name) => {
    const path = join(folder, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

export class Bundle {
  private constructor(readonly root: string, readonly manifest: any) {}

  /** Load and verify; `publicKeyPem` null skips the signature (said on stderr), as --insecure-skip-signature does. */
  static open(root: string, publicKeyPem: string | null): Bundle {
    const raw = readFileSync(join(root, "manifest.json"));
    const manifest = JSON.parse(raw.toString("utf8"));
    if (parseInt(String(manifest.schema_version).split(".")[0], 10) > MANIFEST_SCHEMA_VERSION) {
      throw new Error(`manifest schema ${manifest.schema_version} is newer than this runtime reads (${MANIFEST_SCHEMA_VERSION})`);
    }
    if (publicKeyPem === null) {
      process.stderr.write(`routeforge: WARNING: the signature of the bundle at ${root} was NOT verified\n`);
    } else {
      const sigPath = join(root, "manifest.sig");
      if (!existsSync(sigPath)) throw new Error(`bundle at ${root} refused: unsigned (no manifest.sig)`);
      const doc = JSON.parse(readFileSync(sigPath, "utf8"));
      if (doc.algorithm !== "ed25519") throw new Error(`manifest.sig: algorithm ${doc.algorithm}, expected ed25519`);
      const key = createPublicKey(publicKeyPem);
      const rawKey = key.export({ format: "der", type: "spki" }).subarray(-32);
      const keyId = createHash("sha256").update(rawKey).digest("hex").slice(0, 16);
      if (doc.key_id !== keyId) throw new Error(`signed by another key (key id ${doc.key_id}, expected ${keyId})`);
      if (!verify(null, raw, key, Buffer.from(doc.signature, "base64"))) {
        throw new Error(`bad signature: manifest.json was changed after it was signed by key ${doc.key_id}`);
      }
    }
    const problems: string[] = [];
    const listed = new Set<string>();
    for (const component of manifest.components) {
      for (const file of component.files) {
        listed.add(file.path);
        const parts: string[] = file.path.split("/");
        if (file.path.startsWith("/") || parts.some((p) => p === ".." || p === "" || p.includes("\\"))) {
          problems.push(`${file.path}: not a path inside the bundle`);
          continue;
        }
        const path = join(root, ...parts);
        if (existsSync(path) && lstatSync(path).isSymbolicLink()) { problems.push(`${file.path}: a symlink`); continue; }
        if (!existsSync(path)) { problems.push(`${file.path}: missing`); continue; }
        const bytes = readFileSync(path);
        if (bytes.length !== file.bytes || createHash("sha256").update(bytes).digest("hex") !== file.sha256) {
          problems.push(`${file.path}: sha256 mismatch`);
        }
      }
    }
    for (const path of walk(root)) {
      const rel = relative(root, path).split(sep).join("/");
      if (rel !== "manifest.json" && rel !== "manifest.sig" && !listed.has(rel)) problems.push(`${rel}: not listed in the manifest`);
    }
    if (problems.length) throw new Error(`bundle at ${root} failed verification: ${problems.join("; ")}`);
    return new Bundle(root, manifest);
  }

  components(kind: string): any[] {
    return this.manifest.components.filter((c: any) => c.kind === kind);
  }

  folder(name: string): string {
    return join(this.root, name);
  }

  async encoder(): Promise<SentenceEncoder> {
    return SentenceEncoder.load(this.folder(this.components("sentence_encoder")[0].name));
  }

  router(): Router {
    return Router.load(this.folder(this.components("router")[0].name));
  }

  latency(name: string): LatencyModel {
    return LatencyModel.load(this.folder(name));
  }

  heuristic(name: string): HeuristicPolicy {
    return HeuristicPolicy.load(this.folder(name));
  }
}
