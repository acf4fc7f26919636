// Runs a wasm32-wasip1 test binary under Node's WASI, so that core's unit tests run
// compiled to the same target as the Envoy filter. Used as cargo's target runner.
import { readFile } from 'node:fs/promises';
import { WASI } from 'node:wasi';
import { argv, env, exit } from 'node:process';

const [, , module, ...args] = argv;
const wasi = new WASI({ version: 'preview1', args: [module, ...args], env, preopens: { '/': '/' }, returnOnExit: true });
const compiled = await WebAssembly.compile(await readFile(module));
const instance = await WebAssembly.instantiate(compiled, wasi.getImportObject());
exit(wasi.start(instance));
