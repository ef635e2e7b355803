// Generates the csi.v1 message and service types from @csi/contracts' csi.proto with the same
// loader options the runtime uses (src/csi.ts), into src/generated (not committed), and gives
// the generated relative imports the .js extensions that NodeNext module resolution wants.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const pkg = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const out = path.join(pkg, "src", "generated");
const proto = createRequire(import.meta.url).resolve("@csi/contracts/proto/csi.proto");
const bin = createRequire(import.meta.url).resolve("@grpc/proto-loader/build/bin/proto-loader-gen-types.js");
rmSync(out, { recursive: true, force: true });
execFileSync(
  process.execPath,
  [
    bin,
    "--keepCase",
    "--longs=String",
    "--enums=String",
    "--defaults",
    "--oneofs",
    "--grpcLib=@grpc/grpc-js",
    "-I",
    path.dirname(proto),
    "-O",
    out,
    "csi.proto",
  ],
  { stdio: "inherit" },
);
const walk = (dir) =>
  readdirSync(dir).flatMap((e) => {
    const p = path.join(dir, e);
    return statSync(p).isDirectory() ? walk(p) : p.endsWith(".ts") ? [p] : [];
  });
for (const f of walk(out)) {
  const text = readFileSync(f, "utf8").replace(/from '(\.{1,2}\/[^']*)'/g, "from '$1.js'");
  writeFileSync(f, text);
}
