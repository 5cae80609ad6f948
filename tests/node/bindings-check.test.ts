/**
 * ios/Generated/TesseraBindingsCheck.swift (written by scripts/bindgen.sh with the bindings)
 * against the built library: every checksum function it calls exists in the library and
 * returns the value it expects, the contract version matches, and it checks every checksum
 * function the C header declares. So the check passes against the library the bindings came
 * from, and (comparing the same values as uniffi's own check) fails exactly when uniffi's would.
 * Swift itself is not available here; the values are read through koffi.
 */

import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import { describe, expect, it } from 'vitest';
import { libraryPath } from './koffi-caller';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const check = readFileSync(resolve(root, 'ios/Generated/TesseraBindingsCheck.swift'), 'utf8');
const header = readFileSync(resolve(root, 'ios/Generated/TesseraFFI.h'), 'utf8');
const bindings = readFileSync(resolve(root, 'ios/Generated/TesseraBindings.swift'), 'utf8');

describe('the Swift bindings check', () => {
  const expected = [...check.matchAll(/if (uniffi_tessera_ffi_checksum_\w+)\(\) != (\d+) \{/g)].map((m) => [m[1]!, Number(m[2])] as const);
  const contract = Number(/if contract != (\d+) \{/.exec(check)?.[1]);

  it("checks every checksum function of the header, with the bindings' values", () => {
    const declared = [...header.matchAll(/^uint16_t (uniffi_tessera_ffi_checksum_\w+)\(void/gm)].map((m) => m[1]);
    expect(expected.map(([name]) => name).sort()).toEqual(declared.sort());
    const fromBindings = [...bindings.matchAll(/if \((uniffi_tessera_ffi_checksum_\w+)\(\) != (\d+)\) \{/g)].map((m) => [m[1]!, Number(m[2])]);
    expect(expected.map(([n, v]) => [n, v])).toEqual(fromBindings);
    expect(contract).toBe(Number(/let bindings_contract_version = (\d+)/.exec(bindings)?.[1]));
  });

  it('passes against the built library', () => {
    const lib = koffi.load(libraryPath());
    const version = lib.func('uint32_t ffi_tessera_ffi_uniffi_contract_version(void)') as () => number;
    expect(version()).toBe(contract);
    const got = expected.map(([name]) => [name, (lib.func(`uint16_t ${name}(void)`) as () => number)()] as const);
    expect(got).toEqual(expected);
    expect(expected.length).toBeGreaterThan(10);
  });
});
