/** The batching engine: turns a step-level `StepRunner` into a request-level `Backend`. */
export { BatchingEngine } from './batching-engine.ts'
export type { BatchingEngineLimits, BatchingEngineOptions } from './engine-options.ts'
export { adapterKey, adapterSize, type ReadAdapter } from './adapter-registry.ts'
export { KvBlockAllocator } from './kv-block-allocator.ts'
export { TokenSampler, type SampleInput, type SampleOutcome } from './sampler/token-sampler.ts'
export { SamplingState } from './sampler/sampling-state.ts'
export { SplitMix64, Xoshiro128StarStar } from './sampler/rng.ts'
