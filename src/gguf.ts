/**
 * Model files: {@link ggufInfo} opens a GGUF file on the device (memory-mapped, no tensor data
 * read) and lists its metadata and tensor table, e.g. to write a version-2 graph document that
 * names the file's tensors (docs/graph-format.md).
 *
 * @packageDocumentation
 */

import { request } from './caller';
import { isDType, type DType } from './dtype';
import { InvalidArgumentError, InvalidModelError, TesseraError } from './errors';

/** The type of a metadata value, by gguf-py's names. */
export type GgufValueType =
  | 'UINT8'
  | 'INT8'
  | 'UINT16'
  | 'INT16'
  | 'UINT32'
  | 'INT32'
  | 'FLOAT32'
  | 'BOOL'
  | 'STRING'
  | 'ARRAY'
  | 'UINT64'
  | 'INT64'
  | 'FLOAT64';

/**
 * A metadata value: a number (every integer and float type; 64-bit integers beyond 2^53 lose
 * precision as JSON numbers do, non-finite floats are `null`), a boolean, a string, or an array of
 * these (arrays of arrays nest).
 */
export type GgufValue = number | boolean | string | null | GgufValue[];

/** One metadata entry, in file order. */
export interface GgufMetadataEntry {
  /** The key, e.g. `general.architecture`. */
  key: string;
  /** The value's type. */
  type: GgufValueType;
  /** The value; of an array, its first `arrayItems` items (see {@link GgufInfoOptions}). */
  value: GgufValue;
  /** Of an array: the type of its elements. */
  elementType?: GgufValueType;
  /** Of an array: how many elements the file holds. */
  length?: number;
  /** Of an array: whether `value` leaves some out. */
  truncated?: boolean;
}

/** One tensor of the file's table, in file order. */
export interface GgufTensorInfo {
  /** The tensor's name, e.g. `blk.0.ffn_up.weight`. */
  name: string;
  /** Element type (ggml's name). */
  type: DType;
  /** Dimensions, innermost first (ggml's `ne`). */
  shape: number[];
  /** Size of its data in bytes. */
  bytes: number;
  /** Offset of its data from the start of the data section. */
  offset: number;
}

/** A GGUF file's header, metadata and tensor table. */
export interface GgufInfo {
  /** The path, as given. */
  path: string;
  /** GGUF version (2 or 3). */
  version: number;
  /** The file's size in bytes. */
  fileSize: number;
  /** Alignment of tensor data (`general.alignment`, default 32). */
  alignment: number;
  /** Byte at which the data section starts. */
  dataOffset: number;
  /** Every metadata entry, in file order. */
  metadata: GgufMetadataEntry[];
  /** Every tensor, in file order. */
  tensors: GgufTensorInfo[];
  /** The value of metadata `key`, or `undefined` when the file has none. */
  get(key: string): GgufValue | undefined;
  /** The tensor named `name`, or `undefined`. */
  tensor(name: string): GgufTensorInfo | undefined;
}

/** Options of {@link ggufInfo}. */
export interface GgufInfoOptions {
  /**
   * Items of each metadata array to return (default 16; vocabularies hold hundreds of
   * thousands). Each entry's `length` is the full count either way.
   */
  arrayItems?: number;
}

function malformed(what: string): TesseraError {
  return new TesseraError('Internal', `malformed ggufInfo response: ${what}`);
}

function count(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw malformed(`${what} is not a count`);
  return v;
}

function metadataEntry(e: unknown, i: number): GgufMetadataEntry {
  if (e === null || typeof e !== 'object') throw malformed(`metadata entry ${i}`);
  const o = e as Record<string, unknown>;
  if (typeof o.key !== 'string' || typeof o.type !== 'string' || !('value' in o)) {
    throw malformed(`metadata entry ${i}`);
  }
  const entry: GgufMetadataEntry = { key: o.key, type: o.type as GgufValueType, value: o.value as GgufValue };
  if (o.type === 'ARRAY') {
    entry.elementType = o.element_type as GgufValueType;
    entry.length = count(o.len, `metadata ${JSON.stringify(o.key)}: len`);
    entry.truncated = Boolean(o.truncated);
  }
  return entry;
}

function tensorInfo(t: unknown, i: number): GgufTensorInfo {
  if (t === null || typeof t !== 'object') throw malformed(`tensor ${i}`);
  const o = t as Record<string, unknown>;
  if (typeof o.name !== 'string') throw malformed(`tensor ${i}: no name`);
  const what = `tensor ${JSON.stringify(o.name)}`;
  if (!isDType(o.type)) throw malformed(`${what}: unknown type ${String(o.type)}`);
  if (!Array.isArray(o.shape)) throw malformed(`${what}: no shape`);
  return {
    name: o.name,
    type: o.type,
    shape: o.shape.map((n: unknown) => count(n, `${what}: shape`)),
    bytes: count(o.bytes, `${what}: bytes`),
    offset: count(o.offset, `${what}: offset`),
  };
}

/**
 * Opens the GGUF file at `path` on the device and returns its header, metadata and tensor table
 * (the protocol's `ggufInfo`). The file is memory-mapped and parsed; no tensor data is read.
 *
 * @param path - the file's path on the device
 * @param options - how many items of each metadata array to return
 * @returns the file's description; rejects with an {@link InvalidModelError} naming the file and
 *   what is wrong (missing, unreadable, not GGUF, inconsistent: with the byte offset), or an
 *   {@link InvalidArgumentError} for a bad argument
 */
export async function ggufInfo(path: string, options: GgufInfoOptions = {}): Promise<GgufInfo> {
  if (typeof path !== 'string' || path === '') {
    throw new InvalidArgumentError('ggufInfo: path must be a non-empty string (the GGUF file on the device)');
  }
  const arrayItems = options.arrayItems ?? 16;
  if (!Number.isSafeInteger(arrayItems) || arrayItems < 0) {
    throw new InvalidArgumentError(`ggufInfo: arrayItems ${String(arrayItems)} must be an integer >= 0`);
  }
  let r: Record<string, unknown> | null;
  try {
    r = await request<Record<string, unknown> | null>({ method: 'ggufInfo', path, arrayItems });
  } catch (e) {
    // The core's parse errors say what and where in the file, not always which file.
    if (e instanceof InvalidModelError && !e.message.includes(path)) {
      throw new InvalidModelError(`${path}: ${e.message}`);
    }
    throw e;
  }
  if (r === null || typeof r !== 'object') throw malformed('not an object');
  if (!Array.isArray(r.metadata) || !Array.isArray(r.tensors)) throw malformed('no metadata or tensors');
  const metadata = r.metadata.map(metadataEntry);
  const tensors = r.tensors.map(tensorInfo);
  const byKey = new Map(metadata.map((e) => [e.key, e] as const));
  const byName = new Map(tensors.map((t) => [t.name, t] as const));
  return {
    path,
    version: count(r.version, 'version'),
    fileSize: count(r.file_size, 'file_size'),
    alignment: count(r.alignment, 'alignment'),
    dataOffset: count(r.data_offset, 'data_offset'),
    metadata,
    tensors,
    get: (key) => byKey.get(key)?.value,
    tensor: (name) => byName.get(name),
  };
}
