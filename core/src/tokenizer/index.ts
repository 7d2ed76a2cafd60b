/** The default tokenizer implementation (`@huggingface/tokenizers`) and its streaming decoder. */
export { HfTokenizer } from './hf-tokenizer.ts'
export { HfTokenizerLoader } from './hf-tokenizer-loader.ts'
export { PrefixOffsetDecoder, type DecodeFn } from './incremental-decoder.ts'
export { chatTemplateOf, readTokenizerSettings, tokenString, type TokenizerSettings } from './tokenizer-config.ts'
