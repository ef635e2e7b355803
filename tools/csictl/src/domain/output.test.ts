/** The pure parts of csictl's kubectl-like surface: proto3 JSON of CSI messages, output formats, bulk names, completion scripts. */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { csiServices } from "@csi/runtime";
import { parse as parseYaml } from "yaml";
import { CliError, EXIT } from "../errors.js";
import { concurrencyOption, MAX_BULK_NAMES, mapLimit, parseNames } from "./bulk.js";
import { bashCompletion, type CompletionCommand, zshCompletion } from "./completion.js";
import { type Column, fields, listing, outputFormat, render, table } from "./format.js";
import { ProtoJson, ProtoJsonError } from "./proto-json.js";

const usage = (f: () => unknown, message: RegExp) =>
  assert.throws(f, (e: unknown) => e instanceof CliError && e.exitCode === EXIT.usage && message.test(e.message));

describe("proto3 JSON of CSI messages", () => {
  const services = csiServices();
  const pj = new ProtoJson(services.Identity.Probe.requestType.fileDescriptorProtos);
  const method = (service: string, name: string) => {
    const m = pj.method(`csi.v1.${service}`, name);
    assert.ok(m, `${service}.${name}`);
    return m;
  };
  const modify = method("Controller", "ControllerModifyVolume");
  const create = method("Controller", "CreateVolume");
  const sent = (json: unknown) => services.Controller.ControllerModifyVolume.requestDeserialize(Buffer.from(pj.encode(modify.input, json)));

  test("lowerCamelCase names and the proto names are both accepted, and mean the same", () => {
    const camel = sent({ volumeId: "v", mutableParameters: { readIOPS: "900" } });
    const proto = sent({ volume_id: "v", mutable_parameters: { readIOPS: "900" } });
    const mixed = sent({ volume_id: "v", mutableParameters: { readIOPS: "900" } });
    assert.deepEqual(camel, proto);
    assert.deepEqual(mixed, proto);
    assert.deepEqual(proto.mutable_parameters, { readIOPS: "900" });
    assert.equal(proto.volume_id, "v");
  });

  test("an unknown field, at the top or nested at any depth, is refused", () => {
    assert.throws(
      () => pj.encode(modify.input, { volumeId: "v", bogus: 1 }),
      (e) => e instanceof ProtoJsonError && /key "bogus" is unknown/.test(e.message),
    );
    const nested = { name: "x", volumeCapabilities: [{ accessMode: { mode: "SINGLE_NODE_WRITER", oops: 1 } }] };
    assert.throws(() => pj.encode(create.input, nested), /csi.v1.VolumeCapability.AccessMode from JSON: key "oops" is unknown/);
    assert.throws(() => pj.encode(create.input, { name: "x", volumeContentSource: { snapshot: { snapshotId: "s", extra: "" } } }), /key "extra" is unknown/);
  });

  test("wrong values are refused: a field set twice, a bad enum, a bad int64, not an object", () => {
    assert.throws(() => pj.encode(modify.input, { volumeId: "a", volume_id: "b" }), /set multiple times/);
    assert.throws(() => pj.encode(create.input, { volumeCapabilities: [{ accessMode: { mode: "EVERYONE" } }] }), /enum .* "EVERYONE"/);
    assert.throws(() => pj.encode(create.input, { capacityRange: { requiredBytes: "lots" } }), /int64/);
    assert.throws(() => pj.encode(create.input, []), /JSON object, not an array/);
    assert.throws(() => pj.encode(create.input, null), /JSON object, not null/);
  });

  test("answers print as proto3 JSON: camelCase, int64 strings, RFC 3339 times, wrappers bare, unset messages left out", () => {
    const snapshot = method("Controller", "CreateSnapshot").output;
    const bytes = services.Controller.CreateSnapshot.responseSerialize({
      snapshot: { size_bytes: "5", snapshot_id: "s", source_volume_id: "v", creation_time: { seconds: "1700000000", nanos: 5_000_000 }, ready_to_use: false },
    });
    assert.deepEqual(pj.decode(snapshot, bytes), {
      snapshot: { sizeBytes: "5", snapshotId: "s", sourceVolumeId: "v", creationTime: "2023-11-14T22:13:20.005Z", readyToUse: false, groupSnapshotId: "" },
    });
    const volume = method("Controller", "ControllerGetVolume").output;
    const got = services.Controller.ControllerGetVolume.responseSerialize({
      volume: { volume_id: "v", capacity_bytes: "10" },
      status: { published_node_ids: [] },
    });
    assert.deepEqual(pj.decode(volume, got), {
      volume: { capacityBytes: "10", volumeId: "v", volumeContext: {}, accessibleTopology: [] },
      status: { publishedNodeIds: [] },
    });
    const capacity = method("Controller", "GetCapacity").output;
    const cap = services.Controller.GetCapacity.responseSerialize({ available_capacity: "7", maximum_volume_size: { value: "9" } });
    assert.deepEqual(pj.decode(capacity, cap), { availableCapacity: "7", maximumVolumeSize: "9" });
  });
});

describe("output formats", () => {
  const view = { value: { items: [{ id: "a" }, { id: "b" }] }, human: () => "A\nB", names: () => ["a", "b"] };

  test("-o and --json: json is the alias; anything else, or both saying different things, is a usage error", () => {
    assert.equal(outputFormat({}), "table");
    assert.equal(outputFormat({ json: true }), "json");
    assert.equal(outputFormat({ output: "yaml" }), "yaml");
    assert.equal(outputFormat({ output: "json", json: true }), "json");
    usage(() => outputFormat({ output: "yaml", json: true }), /--json is -o json: not with -o yaml/);
    usage(() => outputFormat({ output: "table" }), /-o takes one of json, yaml, wide, name/);
  });

  test("json, yaml (the same value), name (one id a line), a table; -o name where there are no names is a usage error", () => {
    assert.deepEqual(JSON.parse(render(view, "json")), view.value);
    assert.deepEqual(parseYaml(render(view, "yaml")), view.value);
    assert.equal(render(view, "name"), "a\nb\n");
    assert.equal(render(view, "table"), "A\nB\n");
    assert.equal(render({ ...view, human: () => "" }, "table"), "", "nothing to show: nothing printed");
    usage(() => render({ value: {}, human: () => "" }, "name"), /-o name: this command prints no object names/);
  });

  test("tables: borderless, '-' for what is absent, --no-headers, wide columns only with -o wide", () => {
    assert.equal(
      table(
        ["A", "BB"],
        [
          ["x", undefined],
          ["long", null],
        ],
      ),
      "A     BB\nx     -\nlong  -",
    );
    assert.equal(table(["A", "BB"], [["x", ""]], { headers: false }), "x  -");
    assert.equal(
      fields([
        ["ID", "v"],
        ["EMPTY", ""],
        ["SIZE", 3],
      ]),
      "ID    v\nSIZE  3",
    );
    const columns: Column<{ id: string; image: string }>[] = [
      { head: "ID", cell: (x) => x.id },
      { head: "IMAGE", cell: (x) => x.image, wide: true },
    ];
    const items = [{ id: "v1", image: "img" }];
    assert.equal(listing(columns, items, { wide: false, headers: true }), "ID\nv1");
    assert.equal(listing(columns, items, { wide: true, headers: true }), "ID  IMAGE\nv1  img");
    assert.equal(listing(columns, items, { wide: true, headers: false }), "v1  img");
  });
});

describe("bulk names", () => {
  test("one name a line; blanks, comments and surrounding spaces skipped; arguments first", () => {
    assert.deepEqual(parseNames("  a \n\n# c\nb\r\nc", "f", ["z"]), ["z", "a", "b", "c"]);
  });

  test("a bad line or a name given twice is a usage error naming the line", () => {
    usage(() => parseNames(`ok\n${"x".repeat(129)}`, "names.txt"), /^names.txt:2: a name is at most 128 bytes/);
    usage(() => parseNames("a\tb", "f"), /^f:1: a name has no control characters/);
    usage(() => parseNames("a\nb\na", "f"), /^f:3: "a" is given twice \(first at f:1\)/);
    usage(() => parseNames("a", "f", ["a"]), /^f:1: "a" is given twice \(first at argument 1\)/);
    usage(() => parseNames("", "f", ["a", "b", "a"]), /^argument 3: "a" is given twice \(first at argument 1\)/);
    usage(() => parseNames("", "f", ["a\u0007"]), /^argument 1: a name has no control characters/);
    usage(() => parseNames(Array.from({ length: MAX_BULK_NAMES + 1 }, (_, i) => `n${i}`).join("\n"), "f"), /at most 100000 names/);
  });

  test("--concurrency: 1 to 256, default 16", () => {
    assert.equal(concurrencyOption(undefined), 16);
    assert.equal(concurrencyOption("64"), 64);
    for (const bad of ["0", "257", "x", "1.5", "-1"]) usage(() => concurrencyOption(bad), /--concurrency must be 1 to 256/);
  });

  test("mapLimit: every item, never more than the limit at once, results in the items' order", async () => {
    let running = 0;
    let most = 0;
    const finished: number[] = [];
    const out = await mapLimit(
      [5, 1, 4, 2, 3, 0],
      2,
      async (x) => {
        running++;
        most = Math.max(most, running);
        await new Promise((r) => setImmediate(r));
        running--;
        return x * 10;
      },
      (n) => finished.push(n),
    );
    assert.deepEqual(out, [50, 10, 40, 20, 30, 0]);
    assert.equal(most, 2);
    assert.deepEqual(finished, [1, 2, 3, 4, 5, 6]);
  });
});

describe("completion scripts", () => {
  const tree: CompletionCommand = {
    name: "tool",
    options: [{ flags: ["--version"], takesValue: false }],
    commands: [
      { name: "vol", options: [{ flags: ["--mode"], takesValue: true, choices: ["a", "b"] }], commands: [{ name: "make", options: [], commands: [] }] },
    ],
  };
  const globals = [{ flags: ["-o", "--output"], takesValue: true, choices: ["json", "yaml"] }];

  test("bash: the tree's commands, options (with the global ones everywhere) and choices, keyed by command path", () => {
    const s = bashCompletion(tree, globals);
    assert.match(s, /^ {4}''\) echo '--version -o --output' ;;$/m);
    assert.match(s, /^ {4}'\|-o'\) echo 'json yaml' ;;$/m);
    assert.match(s, /^ {4}''\) echo 'vol' ;;$/m);
    assert.match(s, /^ {4}'vol'\) echo 'make' ;;$/m);
    assert.match(s, /^ {4}'vol'\) echo '--mode -o --output' ;;$/m);
    assert.match(s, /^ {4}'vol\|--mode'\) echo 'a b' ;;$/m);
    assert.match(s, /^ {4}'vol make\|-o'\) echo 'json yaml' ;;$/m);
    assert.match(s, /^complete -F _tool tool$/m);
  });

  test("zsh: the same function through bashcompinit", () => {
    const z = zshCompletion(tree, globals);
    assert.match(z, /autoload -U \+X bashcompinit && bashcompinit/);
    assert.ok(z.includes(bashCompletion(tree, globals)));
  });
});
