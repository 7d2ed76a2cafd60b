// One lint configuration for the whole workspace (flat config).
import tseslint from 'typescript-eslint'

export default tseslint.config(
  { ignores: ['**/node_modules/**', '**/build/**', '**/dist/**', 'models/**', '.tap/**'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-console': ['error', { allow: ['error', 'warn'] }],
    },
  },
  {
    // Command-line tools and benchmarks print their results.
    files: ['**/bench/**', 'tools/**'],
    rules: { 'no-console': 'off' },
  },
)
