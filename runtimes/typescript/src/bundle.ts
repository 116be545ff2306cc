/**
 * A verified bundle folder (docs/bundle-format.md, "verification"): the manifest's Ed25519
 * signature (`manifest.sig`) checked with the operator's public key, every file's size and SHA-256
 * checked against the manifest, nothing unlisted; then components by name.
 */
import { createHash, createPublicKey, verify } from "crypto";
import {
  closeSync, constants, fstatSync, lstatSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync,
  statSync, writeFileSync,
} from "fs";
import { tmpdir } from "os";
import { dirname, join, relative, sep } from "path";
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

/** A `<major>.<minor>` schema version in canonical decimal ("1.1", not "01.1" nor "1.1.0"), as
 * artifacts/bundle/loader.py parses it (the golden cases in tests/artifacts/schema_versions.json hold both to it):
 * [major, minor], or null. */
export function parseSchemaVersion(version: unknown): [number, number] | null {
  if (typeof version !== "string") return null;
  const match = /^(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})$/.exec(version);
  return match ? [Number(match[1]), Number(match[2])] : null;
}

/** The id of an Ed25519 public key: the first 16 hex digits of the sha256 of its raw 32 bytes. */
function keyIdOf(pem: string): string {
  const rawKey = createPublicKey(pem).export({ format: "der", type: "spki" }).subarray(-32);
  return createHash("sha256").update(rawKey).digest("hex").slice(0, 16);
}

/** The pinned keys at `path`: a PEM file, or every `*.pub` in a folder (artifacts/bundle/keyring.py). */
export function loadKeyring(path: string): string[] {
  if (!statSync(path).isDirectory()) return [readPlain(path).toString("utf8")];
  const keys: string[] = [];
  for (const name of readdirSync(path).filter((n) => n.endsWith(".pub")).sort()) {
    try {  // one stray file must not stop every verification: said, not trusted (as artifacts/bundle/keyring.py)
      const pem = readPlain(join(path, name)).toString("utf8");
      keyIdOf(pem);
      keys.push(pem);
    } catch (e: any) {
      process.stderr.write(`routeforge: ${join(path, name)}: ${e.message}; not trusted\n`);
    }
  }
  return keys;
}

/** The bytes of a file the manifest lists, read once (no link followed) and checked against its listed
 * size and SHA-256; or the problem, as `<path>: missing | not a plain file | sha256 mismatch`. */
function listedFile(root: string, file: any): Buffer | string {
  let bytes: Buffer;
  try {
    bytes = readPlain(join(root, ...String(file.path).split("/")));
  } catch (e: any) {
    return `${file.path}: ${String(e.message).endsWith("missing") ? "missing" : "not a plain file"}`;
  }
  if (bytes.length !== file.bytes || createHash("sha256").update(bytes).digest("hex") !== file.sha256) {
    return `${file.path}: sha256 mismatch`;
  }
  return bytes;
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

  /** Load and verify, refusing what the Python loader refuses (artifacts/bundle/loader.py): the manifest and its
   * signature read once each, the signature checked on those bytes first, a `<major>.<minor>` schema
   * version this runtime reads, plain component names with every file inside its component's folder, no
   * link or special file anywhere. `publicKeyPem` null skips the signature (said on stderr). */
  static open(root: string, pinned: string | string[] | null): Bundle {
    const raw = readPlain(join(root, "manifest.json"));
    if (pinned === null) {
      process.stderr.write(`routeforge: WARNING: the signature of the bundle at ${root} was NOT verified\n`);
    } else {
      const keys = new Map((typeof pinned === "string" ? [pinned] : pinned).map((pem) => [keyIdOf(pem), pem]));
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
      const pem = typeof doc.key_id === "string" ? keys.get(doc.key_id) : undefined;
      if (pem === undefined) {
        throw new Error(`signed by another key (key id ${JSON.stringify(String(doc.key_id).slice(0, 64))}, which is not `
          + `pinned; pinned: ${[...keys.keys()].sort().join(", ") || "none"})`);
      }
      if (!verify(null, raw, createPublicKey(pem), signature)) {
        throw new Error(`bad signature: manifest.json was changed after it was signed by key ${doc.key_id}`);
      }
    }
    const manifest = JSON.parse(raw.toString("utf8"));
    const version = manifest.schema_version;
    const parsed = parseSchemaVersion(version);
    if (parsed === null || parsed[0] !== MANIFEST_SCHEMA_VERSION || parsed[1] > MANIFEST_SCHEMA_MINOR) {
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
        const checked = listedFile(root, file);
        if (typeof checked === "string") problems.push(checked);
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

  private snapshot: string | null = null;

  /** The folder of a private copy of component `name` (a temporary folder of this process, removed at
   * exit or by `close()`), each file hashed as it was read and checked against the manifest: what a
   * loader reads is what was signed, even if the bundle folder is edited after `open` (Python:
   * `RouterBundle.verified_copy`). */
  folder(name: string): string {
    const component = this.manifest.components.find((c: any) => c.name === name);
    if (!component) throw new Error(`bundle ${this.manifest.name} has no component ${name}`);
    if (this.snapshot === null) {
      const snapshot = mkdtempSync(join(tmpdir(), "routeforge-verified-"));
      this.snapshot = snapshot;
      process.once("exit", () => rmSync(snapshot, { recursive: true, force: true }));
    }
    const folder = join(this.snapshot, name);
    try {
      if (statSync(folder).isDirectory()) return folder;
    } catch { /* not copied yet */ }
    const problems: string[] = [];
    for (const file of component.files) {
      const checked = listedFile(this.root, file);
      if (typeof checked === "string") {
        problems.push(checked);
        continue;
      }
      const target = join(this.snapshot, ...String(file.path).split("/"));
      mkdirSync(dirname(target), { recursive: true, mode: 0o700 });
      writeFileSync(target, checked, { mode: 0o600, flag: "wx" });
    }
    if (problems.length) {
      rmSync(folder, { recursive: true, force: true });
      throw new Error(`component ${name} of the bundle at ${this.root} changed after it was verified: ${problems.join("; ")}`);
    }
    return folder;
  }

  /** Remove the verified copies (a long-lived service that loaded everything it needs). */
  close(): void {
    if (this.snapshot !== null) rmSync(this.snapshot, { recursive: true, force: true });
    this.snapshot = null;
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
