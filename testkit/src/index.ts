/**
 * `@loom/testkit`: deterministic fixtures for Loom's tests — safetensors files, tiny Hugging Face
 * model folders, PEFT LoRA adapters, byte-level BPE tokenizers — and a float64 reference forward
 * pass to compare backends against.
 */
export * from './random.ts'
export * from './float-codec.ts'
export * from './safetensors-writer.ts'
export * from './safetensors-reader.ts'
export * from './tokenizer-builder.ts'
export * from './model-config.ts'
export * from './peft-pattern.ts'
export * from './model-builder.ts'
export * from './reference-model.ts'
export * from './fake-hub/index.ts'
export * from './fake-hosted/index.ts'
