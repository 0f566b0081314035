/**
 * JSON helpers: the exact text of job bodies inside a reply (JavaScript
 * numbers lose precision above 2^53, so `JSON.parse` alone cannot give a
 * body back as it was sent), and key case conversion between the wire's
 * snake_case and the client's camelCase.
 */

/**
 * Finds every member named `body` in the JSON `text` (not looking inside a
 * body) and returns its exact text, keyed by the path of the object that
 * holds it (`""` for the top level, `"jobs.3"`, `"spec"`).
 */
export function rawBodies(text: string): Map<string, string> {
  const out = new Map<string, string>();
  if (!text.includes('"body"')) return out;
  let i = 0;
  const n = text.length;
  const ws = (): void => {
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c === 32 || c === 9 || c === 10 || c === 13) i++;
      else break;
    }
  };
  const str = (): string => {
    const start = i;
    i++;
    for (;;) {
      const q = text.indexOf('"', i);
      if (q < 0) throw new SyntaxError("unterminated string");
      let b = q - 1;
      let slashes = 0;
      while (text.charCodeAt(b) === 92) {
        slashes++;
        b--;
      }
      i = q + 1;
      if (slashes % 2 === 0) break;
    }
    return text.slice(start, i);
  };
  const value = (path: string | null): void => {
    ws();
    const c = text.charCodeAt(i);
    if (c === 123 /* { */) {
      i++;
      ws();
      if (text.charCodeAt(i) === 125) {
        i++;
        return;
      }
      for (;;) {
        ws();
        const k = str();
        const key = k.includes("\\") ? (JSON.parse(k) as string) : k.slice(1, -1);
        ws();
        i++; // ':'
        if (path !== null && key === "body") {
          ws();
          const s = i;
          value(null);
          out.set(path, text.slice(s, i));
        } else {
          value(path === null ? null : path === "" ? key : `${path}.${key}`);
        }
        ws();
        if (text.charCodeAt(i) === 44) {
          i++;
          continue;
        }
        i++; // '}'
        return;
      }
    } else if (c === 91 /* [ */) {
      i++;
      ws();
      if (text.charCodeAt(i) === 93) {
        i++;
        return;
      }
      let idx = 0;
      for (;;) {
        value(path === null ? null : path === "" ? String(idx) : `${path}.${idx}`);
        idx++;
        ws();
        if (text.charCodeAt(i) === 44) {
          i++;
          continue;
        }
        i++; // ']'
        return;
      }
    } else if (c === 34 /* " */) {
      str();
    } else {
      // number, true, false, null
      while (i < n) {
        const d = text.charCodeAt(i);
        if (d === 44 || d === 93 || d === 125 || d === 32 || d === 9 || d === 10 || d === 13) break;
        i++;
      }
    }
  };
  value("");
  return out;
}

const camelCache = new Map<string, string>();
const snakeCache = new Map<string, string>();

function camel(k: string): string {
  let v = camelCache.get(k);
  if (v === undefined) {
    v = k.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
    camelCache.set(k, v);
  }
  return v;
}

function snake(k: string): string {
  let v = snakeCache.get(k);
  if (v === undefined) {
    v = k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    snakeCache.set(k, v);
  }
  return v;
}

/** Keys whose values are data (a job body, HTTP header names), never renamed. */
const OPAQUE = new Set(["body", "headers"]);

function convert(v: unknown, rename: (k: string) => string, dropUndefined: boolean): unknown {
  if (Array.isArray(v)) return v.map((x) => convert(x, rename, dropUndefined));
  if (v !== null && typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
      if (dropUndefined && x === undefined) continue;
      const name = rename(k);
      out[name] = OPAQUE.has(k) || OPAQUE.has(name) ? x : convert(x, rename, dropUndefined);
    }
    return out;
  }
  return v;
}

/** A wire object (snake_case keys) with camelCase keys, deeply (not inside bodies or headers). */
export function camelize<T>(v: unknown): T {
  return convert(v, camel, false) as T;
}

/** An object with camelCase keys as the wire's snake_case, deeply; undefined members dropped. */
export function snakeize(v: unknown): Record<string, unknown> {
  return convert(v, snake, true) as Record<string, unknown>;
}
