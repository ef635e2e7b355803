#!/usr/bin/env node
// csictl's bin (`npx csictl`, `npm run csictl`). In a checkout (tsx is installed: a development
// install) it runs the TypeScript sources with no build step: tsx's loader, and the workspaces'
// "source" export condition so that @csi/* resolve to their src/*.ts too (docs/building.md).
// Where tsx is absent (the image: `npm ci --omit=dev`) it runs what `npm run build` made,
// dist/main.js, which the image can also run directly. CSI_RUN_BUILT=1 (set by `npm test` after
// it has built) runs dist/main.js in a checkout too (docs/building.md, "Tests run built services").
let tsx;
if (process.env.CSI_RUN_BUILT !== "1") {
  try {
    tsx = await import("tsx/esm/api");
  } catch (err) {
    if (err?.code !== "ERR_MODULE_NOT_FOUND") throw err;
  }
}
if (tsx) {
  const { register } = await import("node:module");
  register(
    `data:text/javascript,${encodeURIComponent(
      "export const resolve = (specifier, context, next) => next(specifier, { ...context, conditions: [...context.conditions, 'source'] });",
    )}`,
  );
  tsx.register();
  await import("../src/main.ts");
} else {
  await import("../dist/main.js");
}
