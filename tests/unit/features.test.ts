import { afterEach, describe, expect, it } from 'vitest';
import { cpuFeaturesFromNative } from '../../src/features';
import { _emitNativeLog } from '../../src/caller';
import { addNativeLogListener, getBuildInfo, getCpuFeatures, getDevices, setLogLevel, setNativeCaller } from '../../src/index';
import { fakeCaller } from './fake';

afterEach(() => setNativeCaller(null));

const armPairs = [
  { name: 'NEON', value: '1' },
  { name: 'ARM_FMA', value: '1' },
  { name: 'FP16_VA', value: '1' },
  { name: 'DOTPROD', value: '1' },
  { name: 'MATMUL_INT8', value: '0' },
  { name: 'SVE', value: '1' },
  { name: 'SVE_CNT', value: '32' },
  { name: 'SME', value: '0' },
];

describe('getCpuFeatures', () => {
  it('maps ggml feature names of an ARM phone to typed flags', async () => {
    const fake = fakeCaller(() => ({
      pairs: armPairs,
      tiers: [
        { dtype: 'Q4_0', tier: 'neon+dotprod' },
        { dtype: 'Q8_0', tier: 'neon+dotprod' },
        { dtype: 'F16', tier: 'neon' },
      ],
    }));
    setNativeCaller(fake);
    const f = await getCpuFeatures();
    expect(fake.requests).toEqual([{ method: 'cpuFeatures' }]);
    expect(f).toMatchObject({
      neon: true,
      armFma: true,
      fp16: true,
      dotprod: true,
      i8mm: false,
      sve: true,
      sveCnt: 32,
      sme: false,
      avx2: false,
      avx512: false,
    });
    expect(f.pairs).toEqual(armPairs);
    expect(f.raw.SVE_CNT).toBe('32');
    expect(f.tiers[0]).toEqual({ dtype: 'Q4_0', tier: 'neon+dotprod' });
    expect(f.tierByType).toEqual({ Q4_0: 'neon+dotprod', Q8_0: 'neon+dotprod', F16: 'neon' });
  });

  it('maps x86 names, numbers and booleans, and keeps unknown names raw', () => {
    const f = cpuFeaturesFromNative({
      pairs: [
        { name: 'SSE3', value: '1' },
        { name: 'SSSE3', value: 1 },
        { name: 'AVX', value: true },
        { name: 'AVX_VNNI', value: '0' },
        { name: 'AVX2', value: '1' },
        { name: 'F16C', value: '1' },
        { name: 'FMA', value: '1' },
        { name: 'BMI2', value: '1' },
        { name: 'AVX512', value: '1' },
        { name: 'AVX512_VBMI', value: '0' },
        { name: 'AVX512_VNNI', value: '1' },
        { name: 'AVX512_BF16', value: 'false' },
        { name: 'AMX_INT8', value: '0' },
        { name: 'NEW_THING', value: '3' },
      ],
    });
    expect(f).toMatchObject({
      sse3: true,
      ssse3: true,
      avx: true,
      avxVnni: false,
      avx2: true,
      f16c: true,
      fma: true,
      bmi2: true,
      avx512: true,
      avx512Vbmi: false,
      avx512Vnni: true,
      avx512Bf16: false,
      amxInt8: false,
      neon: false,
      sveCnt: 0,
    });
    expect(f.raw.NEW_THING).toBe('3');
    expect(f.tiers).toEqual([]);
    expect(cpuFeaturesFromNative(undefined).pairs).toEqual([]);
  });
});

describe('devices and build info', () => {
  it('getDevices returns typed devices', async () => {
    setNativeCaller(
      fakeCaller(() => [
        {
          backend: 'Vulkan',
          name: 'Vulkan0',
          description: 'Adreno 740',
          type: 'igpu',
          memoryFree: 1e9,
          memoryTotal: 2e9,
          caps: { asyncOps: true, hostBuffer: false, bufferFromHostPtr: false, events: true },
        },
        { backend: 'CPU', name: 'CPU', description: 'Cortex-X3', type: 'cpu', memoryFree: 5, memoryTotal: 8, caps: {} },
      ])
    );
    const devices = await getDevices();
    expect(devices.map((d) => [d.name, d.type])).toEqual([
      ['Vulkan0', 'igpu'],
      ['CPU', 'cpu'],
    ]);
    expect(devices[0]!.caps).toEqual({ asyncOps: true, hostBuffer: false, bufferFromHostPtr: false, events: true });
    expect(devices[1]!.caps.events).toBe(false);
    setNativeCaller(fakeCaller(() => ({ not: 'an array' })));
    await expect(getDevices()).rejects.toThrow(/malformed devices response/);
  });

  it('getBuildInfo', async () => {
    setNativeCaller(fakeCaller(() => ({ version: '0.1.0', target: 'aarch64-linux-android', features: ['oslog'], profile: 'release' })));
    expect(await getBuildInfo()).toEqual({ version: '0.1.0', target: 'aarch64-linux-android', features: ['oslog'], profile: 'release' });
  });

  it('setLogLevel validates the level', async () => {
    const fake = fakeCaller(() => ({}));
    setNativeCaller(fake);
    await setLogLevel('warn');
    expect(fake.requests).toEqual([{ method: 'setLogLevel', level: 'warn' }]);
    await expect(setLogLevel('loud' as 'warn')).rejects.toThrow(/log level "loud" is not one of/);
  });

  it('log listeners follow the injected caller; a throwing listener does not stop the others', () => {
    const fake = fakeCaller(() => ({}));
    setNativeCaller(fake);
    const seen: string[] = [];
    const off1 = addNativeLogListener(() => {
      throw new Error('bad listener');
    });
    const off2 = addNativeLogListener((e) => seen.push(e.message));
    expect(fake.listenerCount()).toBe(1);
    fake.emit({ level: 'warn', target: 't', message: 'one' });
    _emitNativeLog({ level: 'warn', target: 't', message: 'two' });
    expect(seen).toEqual(['one', 'two']);
    const other = fakeCaller(() => ({}));
    setNativeCaller(other);
    expect(fake.listenerCount()).toBe(0);
    expect(other.listenerCount()).toBe(1);
    off1();
    off2();
    expect(other.listenerCount()).toBe(0);
  });
});
