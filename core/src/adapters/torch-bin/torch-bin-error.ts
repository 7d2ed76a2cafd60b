/**
 * The one error the `.bin` reader's parts throw. `refused` marks content that is well-formed but
 * outside what a plain `torch.save` state dict may contain (a global not on the allow-list, an
 * out-of-band buffer); everything else is a damaged or unsupported file. The caller turns it into
 * an `adapter_invalid` naming the adapter.
 */
export class TorchBinError extends Error {
  readonly refused: boolean

  constructor(message: string, options: { refused?: boolean } = {}) {
    super(message)
    this.name = 'TorchBinError'
    this.refused = options.refused ?? false
  }
}
