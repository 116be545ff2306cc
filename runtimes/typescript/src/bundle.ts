/**
 * A verified bundle folder (docs/bundle-format.md, "verification"): the manifest's Ed25519
 * signature (`manifest.sig`) checked with the operator's public key, every file's size and SHA-256
 * checked against the manifest, nothing unlisted; then components by name.
 */
import { createHash, createPublicKey, verify } from "crypto";
import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, readFileSync } from "fs";
import { join, relative, sep } from "path";
import { SentenceEncoder } from "./encoder";
import { HeuristicPolicy } from "./heuristics";
import { LatencyModel } from "./latency";
import { Router } from "./router";

export const MANIFEST_SCHEMA_VERSION = 1;
// the newest minor this runtime reads: a newer one may carry signed claims it cannot honour (1.1 added `provenance`)
export const MANIFEST_SCHEMA_MINOR = 1;
const COMPONENT_NAME = /^[A-Za-z0-9][A-Za-z0-9_.@+=-]*$/;

/** The bytes of a plain file, read once through one descriptor opened without following a link. */
function readPlain(path: string): Buffer {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e: any) {
    throw new Error(e.code === "ENOENT" ? `${path}: missing` : `${path}: not a plain file (${e.code})`);
  }
  try {
    if (!fstatSync(fd).isFile()) throw new Error(`${path}: not a plain file (a folder or special file)`);
    return readFileSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Every entry under `folder` that is not a plain file or folder (links never followed), and every file. */
function walk(folder: string, odd: string[], root: string): string[] {
  return readdirSync(folder).flatMap((name) => {
    const path = join(folder, name);
    const stat = lstatSync(path);
    const rel = relative(root, path).split(sep).join("/");
    if (stat.isSymbolicLink()) { odd.push(`${rel}: a symbolic link`); return []; }
    if (stat.isDirectory()) return walk(path, odd, root);
    if (!stat.isFile()) { odd.push(`${rel}: a special file (device, pipe or socket)`); return []; }
    return [path];
  });
}

export class Bundle {
  private constructor(readonly root: string, readonly manifest: any) {}

  /** Load and verify, refusing what the Python loader refuses (artifacts/loader.py): the manifest and its
   * signature read once each, the signature checked on those bytes first, a `<major>.<minor>` schema
   * version this runtime reads, plain component names with every file inside its component's folder, no
   * link or special file anywhere. `publicKeyPem` null skips the signature (said on stderr). */
  static open(root: string, publicKeyPem: string | null): Bundle {
    const raw = readPlain(join(root, "manifest.json"));
    if (publicKeyPem === null) {
      process.stderr.write(`routeforge: WARNING: the signature of the bundle at ${root} was NOT verified\n`);
    } else {
      let sigBytes: Buffer;
      try {
        sigBytes = readPlain(join(root, "manifest.sig"));
      } catch (e: any) {
        throw new Error(`bundle at ${root} refused: ${String(e.message).endsWith("missing") ? "unsigned (no manifest.sig)" : e.message}`);
      }
      const doc = JSON.parse(sigBytes.toString("utf8"));
      if (doc.algorithm !== "ed25519") throw new Error(`manifest.sig: algorithm ${doc.algorithm}, expected ed25519`);
      const signature = typeof doc.signature === "string" ? Buffer.from(doc.signature, "base64") : Buffer.alloc(0);
      if (signature.length !== 64 || signature.toString("base64") !== doc.signature) {
        throw new Error("manifest.sig: malformed (an Ed25519 signature is 64 bytes in canonical base64)");
      }
      const key = createPublicKey(publicKeyPem);
      const rawKey = key.export({ format: "der", type: "spki" }).subarray(-32);
      const keyId = createHash("sha256").update(rawKey).digest("hex").slice(0, 16);
      if (doc.key_id !== keyId) throw new Error(`signed by another key (key id ${doc.key_id}, expected ${keyId})`);
      if (!verify(null, raw, key, signature)) {
        throw new Error(`bad signature: manifest.json was changed after it was signed by key ${doc.key_id}`);
      }
    }
    const manifest = JSON.parse(raw.toString("utf8"));
    const version = manifest.schema_version;
    if (typeof version !== "string" || !/^\d+\.\d+$/.test(version) || parseInt(version, 10) !== MANIFEST_SCHEMA_VERSION
        || parseInt(version.split(".")[1], 10) > MANIFEST_SCHEMA_MINOR) {
      throw new Error(`manifest schema_version ${JSON.stringify(version)} is not one this runtime reads `
        + `(${MANIFEST_SCHEMA_VERSION}.0 to ${MANIFEST_SCHEMA_VERSION}.${MANIFEST_SCHEMA_MINOR}; upgrade the runtime)`);
    }
    const problems: string[] = [];
    for (const component of manifest.components) {
      const name = component.name;
      if (typeof name !== "string" || !COMPONENT_NAME.test(name) || name === "." || name === "..") {
        problems.push(`component ${JSON.stringify(name)}: not a plain name`);
        continue;
      }
      for (const file of component.files) {
        const parts: string[] = String(file.path).split("/");
        if (file.path.startsWith("/") || parts.some((p) => p === ".." || p === "" || p.includes("\\"))) {
          problems.push(`${file.path}: not a path inside the bundle`);
        } else if (parts[0] !== name) {
          problems.push(`${file.path}: outside its component's folder ${name}/`);
        }
      }
    }
    if (problems.length) throw new Error(`bundle at ${root} refused: ${problems.join("; ")}`);
    const odd: string[] = [];
    const present = walk(root, odd, root);
    if (odd.length) throw new Error(`bundle at ${root} refused: ${odd.join("; ")}`);
    const listed = new Set<string>();
    for (const component of manifest.components) {
      for (const file of component.files) {
        listed.add(file.path);
        let bytes: Buffer;
        try {
          bytes = readPlain(join(root, ...String(file.path).split("/")));
        } catch (e: any) {
          problems.push(`${file.path}: ${String(e.message).endsWith("missing") ? "missing" : "not a plain file"}`);
          continue;
        }
        if (bytes.length !== file.bytes || createHash("sha256").update(bytes).digest("hex") !== file.sha256) {
          problems.push(`${file.path}: sha256 mismatch`);
        }
      }
    }
    for (const path of present) {
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
