/** Structured output: JSON-schema constraints compiled by XGrammar and applied as token masks. */
export { XGrammarConstraintFactory, type XGrammarConstraintFactoryOptions } from './xgrammar-constraint-factory.ts'
export { XGrammarConstraint } from './xgrammar-constraint.ts'
export { loadXGrammar, loadXGrammarInstance, type XGrammarApi, type XGrammarInstance } from './load-xgrammar.ts'
export { vocabularyFromTokenizerJson, type XGrammarVocabulary, type XGrammarVocabType } from './tokenizer-vocabulary.ts'
