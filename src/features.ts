/**
 * Devices, CPU features and build information, as reported by the Rust core.
 *
 * @packageDocumentation
 */

import { request } from './caller';
import { TesseraError } from './errors';

/** The kind of a device, as ggml's device types. */
export type DeviceType = 'cpu' | 'gpu' | 'igpu' | 'accel';

/** What a device can do besides computing. */
export interface DeviceCaps {
  /** Asynchronous compute and transfers. */
  asyncOps: boolean;
  /** Has a pinned host buffer type for fast transfers. */
  hostBuffer: boolean;
  /** Can wrap host memory as a buffer without copying. */
  bufferFromHostPtr: boolean;
  /** Supports events for synchronisation between backends. */
  events: boolean;
}

/** A compute device. */
export interface DeviceInfo {
  /** The backend (registry) that provides it: "CPU", "Vulkan", "Metal", ... */
  backend: string;
  /** The device's name, to pass as `device` to {@link compute} and {@link Session.open}. */
  name: string;
  /** A human-readable description: the CPU model or the GPU adapter. */
  description: string;
  /** CPU, discrete GPU, integrated GPU or accelerator. */
  type: DeviceType;
  /** Free memory in bytes. */
  memoryFree: number;
  /** Total memory in bytes. */
  memoryTotal: number;
  /** Capabilities. */
  caps: DeviceCaps;
}

/** One raw CPU feature, as ggml's `name = value` pairs (`DOTPROD = 1`, `SVE_CNT = 32`). */
export interface CpuFeaturePair {
  /** ggml's feature name. */
  name: string;
  /** The value: "1" / "0" for flags, a number for counts. */
  value: string;
}

/** The kernel tier the CPU backend uses for matrix products with weights of one type. */
export interface KernelTier {
  /** The weight type ("Q4_0", "F16", ...). */
  dtype: string;
  /** The tier: "scalar", "neon", "neon+dotprod", "neon+i8mm", "avx2", ... */
  tier: string;
}

/**
 * The CPU's SIMD features that matter for kernel selection. Features of the other
 * architecture are `false` (and `sveCnt` 0).
 */
export interface CpuFeatures {
  /** AdvSIMD (ggml `NEON`). */
  neon: boolean;
  /** Fused multiply-add in NEON (`ARM_FMA`). */
  armFma: boolean;
  /** Half-precision vector arithmetic, FEAT_FP16 (`FP16_VA`). */
  fp16: boolean;
  /** SDOT / UDOT, FEAT_DotProd (`DOTPROD`). */
  dotprod: boolean;
  /** SMMLA / UMMLA int8 matrix multiply, FEAT_I8MM (`MATMUL_INT8`). */
  i8mm: boolean;
  /** Scalable Vector Extension (`SVE`). */
  sve: boolean;
  /** SVE vector length in bytes, 0 without SVE (`SVE_CNT`). */
  sveCnt: number;
  /** Scalable Matrix Extension (`SME`). */
  sme: boolean;
  /** SSE3 (`SSE3`). */
  sse3: boolean;
  /** SSSE3 (`SSSE3`). */
  ssse3: boolean;
  /** AVX (`AVX`). */
  avx: boolean;
  /** AVX-VNNI (`AVX_VNNI`). */
  avxVnni: boolean;
  /** AVX2 (`AVX2`). */
  avx2: boolean;
  /** F16C half conversions (`F16C`). */
  f16c: boolean;
  /** FMA3 (`FMA`). */
  fma: boolean;
  /** BMI2 (`BMI2`). */
  bmi2: boolean;
  /** AVX-512 Foundation (`AVX512`). */
  avx512: boolean;
  /** AVX-512 VBMI (`AVX512_VBMI`). */
  avx512Vbmi: boolean;
  /** AVX-512 VNNI (`AVX512_VNNI`). */
  avx512Vnni: boolean;
  /** AVX-512 BF16 (`AVX512_BF16`). */
  avx512Bf16: boolean;
  /** AMX int8 (`AMX_INT8`). */
  amxInt8: boolean;
  /** Every raw pair, in the order the core lists them. */
  pairs: CpuFeaturePair[];
  /** The raw pairs by name. */
  raw: Record<string, string>;
  /** The kernel tier per weight type, in the core's order. */
  tiers: KernelTier[];
  /** The kernel tier by weight type name. */
  tierByType: Record<string, string>;
}

/** Build information of the native library. */
export interface BuildInfo {
  /** The crate version. */
  version: string;
  /** The Rust target triple, e.g. `aarch64-linux-android`. */
  target: string;
  /** Enabled Cargo features. */
  features: string[];
  /** "release" or "debug". */
  profile: string;
}

/** ggml feature names and the {@link CpuFeatures} flags they set. */
export const CPU_FEATURE_NAMES = {
  NEON: 'neon',
  ARM_FMA: 'armFma',
  FP16_VA: 'fp16',
  DOTPROD: 'dotprod',
  MATMUL_INT8: 'i8mm',
  SVE: 'sve',
  SME: 'sme',
  SSE3: 'sse3',
  SSSE3: 'ssse3',
  AVX: 'avx',
  AVX_VNNI: 'avxVnni',
  AVX2: 'avx2',
  F16C: 'f16c',
  FMA: 'fma',
  BMI2: 'bmi2',
  AVX512: 'avx512',
  AVX512_VBMI: 'avx512Vbmi',
  AVX512_VNNI: 'avx512Vnni',
  AVX512_BF16: 'avx512Bf16',
  AMX_INT8: 'amxInt8',
} as const satisfies Record<string, keyof CpuFeatures>;

type FlagName = (typeof CPU_FEATURE_NAMES)[keyof typeof CPU_FEATURE_NAMES];

function numeric(value: unknown): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'boolean') return value ? 1 : 0;
  const text = String(value).trim().toLowerCase();
  if (text === 'true' || text === 'yes' || text === 'on') return 1;
  const n = Number(text);
  return Number.isFinite(n) ? n : 0;
}

/**
 * {@link CpuFeatures} from the core's `cpuFeatures` result (`{pairs: [{name, value}],
 * tiers: [{dtype, tier}]}`). Unknown names are kept in `pairs` and `raw` only.
 */
export function cpuFeaturesFromNative(result: unknown): CpuFeatures {
  const r = (result ?? {}) as { pairs?: unknown; tiers?: unknown };
  const pairs: CpuFeaturePair[] = Array.isArray(r.pairs)
    ? r.pairs.map((p: { name?: unknown; value?: unknown }) => ({ name: String(p?.name ?? ''), value: String(p?.value ?? '') }))
    : [];
  const tiers: KernelTier[] = Array.isArray(r.tiers)
    ? r.tiers.map((t: { dtype?: unknown; tier?: unknown }) => ({ dtype: String(t?.dtype ?? ''), tier: String(t?.tier ?? '') }))
    : [];
  const flags = Object.fromEntries(Object.values(CPU_FEATURE_NAMES).map((k) => [k, false])) as Record<FlagName, boolean>;
  const raw: Record<string, string> = {};
  let sveCnt = 0;
  for (const { name, value } of pairs) {
    raw[name] = value;
    if (name === 'SVE_CNT') {
      sveCnt = numeric(value);
    } else if (Object.prototype.hasOwnProperty.call(CPU_FEATURE_NAMES, name)) {
      flags[CPU_FEATURE_NAMES[name as keyof typeof CPU_FEATURE_NAMES]] = numeric(value) !== 0;
    }
  }
  const tierByType: Record<string, string> = {};
  for (const { dtype, tier } of tiers) tierByType[dtype] = tier;
  return { ...flags, sveCnt, pairs, raw, tiers, tierByType };
}

function deviceType(t: unknown): DeviceType {
  const s = String(t ?? '').toLowerCase();
  return s === 'gpu' || s === 'igpu' || s === 'accel' ? s : 'cpu';
}

/** {@link DeviceInfo}s from the core's `devices` result. */
export function devicesFromNative(result: unknown): DeviceInfo[] {
  if (!Array.isArray(result)) {
    throw new TesseraError('Internal', 'malformed devices response: expected an array');
  }
  return result.map((d: Record<string, unknown>) => {
    const caps = (d.caps ?? {}) as Record<string, unknown>;
    return {
      backend: String(d.backend ?? ''),
      name: String(d.name ?? ''),
      description: String(d.description ?? ''),
      type: deviceType(d.type),
      memoryFree: Number(d.memoryFree ?? 0),
      memoryTotal: Number(d.memoryTotal ?? 0),
      caps: {
        asyncOps: Boolean(caps.asyncOps),
        hostBuffer: Boolean(caps.hostBuffer),
        bufferFromHostPtr: Boolean(caps.bufferFromHostPtr),
        events: Boolean(caps.events),
      },
    };
  });
}

/**
 * The devices that can compute, GPU first and the CPU last (the order `device: "auto"`
 * tries them in).
 */
export async function getDevices(): Promise<DeviceInfo[]> {
  return devicesFromNative(await request({ method: 'devices' }));
}

/** The CPU's features and the kernel tier the CPU backend picked for each weight type. */
export async function getCpuFeatures(): Promise<CpuFeatures> {
  return cpuFeaturesFromNative(await request({ method: 'cpuFeatures' }));
}

/** The native library's version, target, Cargo features and profile. */
export async function getBuildInfo(): Promise<BuildInfo> {
  const r = (await request<Record<string, unknown>>({ method: 'buildInfo' })) ?? {};
  return {
    ...r,
    version: String(r.version ?? ''),
    target: String(r.target ?? ''),
    features: Array.isArray(r.features) ? r.features.map(String) : [],
    profile: String(r.profile ?? ''),
  };
}
