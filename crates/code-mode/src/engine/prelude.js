// Runs once per engine, before the script. Installs `tools`, `console`, `ToolError` and
// `ToolDenied`, and returns the function the engine calls to settle a sub-call's promise.
// Everything the bridge relies on is captured here, so a script that overwrites globals
// (JSON, Promise, ...) only breaks itself; the run_code result is built on the Rust side.
(function (send, print, names) {
  "use strict";
  const P = Promise;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const freeze = Object.freeze;
  const define = Object.defineProperty;
  const pending = Object.create(null);

  class ToolError extends Error {
    constructor(r) {
      super(r.message);
      this.name = "ToolError";
      this.code = r.code;
      this.tool = r.tool;
      this.callId = r.callId;
    }
  }
  class ToolDenied extends ToolError {
    constructor(r) {
      super(r);
      this.name = "ToolDenied";
      this.reason = r.message;
    }
  }

  const tools = Object.create(null);
  for (const name of names) {
    tools[name] = function (args) {
      const text = args === undefined ? "{}" : stringify(args);
      if (typeof text !== "string") {
        throw new TypeError("the arguments of tools." + name + " must be JSON");
      }
      return new P(function (resolve, reject) {
        const id = send(name, text);
        pending[id] = { resolve, reject };
      });
    };
  }

  const show = function (v) {
    if (typeof v === "string") return v;
    if (v instanceof Error) return String(v);
    try {
      const s = stringify(v);
      return s === undefined ? String(v) : s;
    } catch (_) {
      return String(v);
    }
  };
  const line = function (...args) {
    print(args.map(show).join(" "));
  };
  const console = freeze({ log: line, info: line, warn: line, error: line, debug: line });

  const fixed = { writable: false, enumerable: false, configurable: false };
  define(globalThis, "tools", { ...fixed, value: freeze(tools) });
  define(globalThis, "console", { ...fixed, value: console });
  define(globalThis, "ToolError", { ...fixed, value: ToolError });
  define(globalThis, "ToolDenied", { ...fixed, value: ToolDenied });

  return function settle(id, json) {
    const p = pending[id];
    delete pending[id];
    if (p === undefined) return;
    const r = parse(json);
    if (r.ok) {
      p.resolve(r.result);
    } else if (r.denied) {
      p.reject(new ToolDenied(r));
    } else {
      p.reject(new ToolError(r));
    }
  };
})
