/** Injection tokens for what the core itself puts in each server's container. */

/** The server's `ValidConfig`. */
export const ServerConfig: unique symbol = Symbol('ServerConfig')
/** The server's root `Logger`. */
export const ServerLogger: unique symbol = Symbol('ServerLogger')
