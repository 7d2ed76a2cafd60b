/**
 * Validation of manifests against the Kubernetes and Gateway API schemas that kubernetes-models and
 * @kubernetes-models/gateway-api compile from the upstream OpenAPI documents (types, formats,
 * enums, required fields). Those schemas, like the API server's, accept fields they do not
 * declare, so a misspelt optional field passes here: the tests read the fields they care about
 * (probes, ports, env, volumes) from where Kubernetes reads them.
 */
import { Gateway } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/Gateway'
import { HTTPRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute'
import { Deployment } from 'kubernetes-models/apps/v1/Deployment'
import { Role } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role'
import { RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding'
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap'
import { PersistentVolumeClaim } from 'kubernetes-models/v1/PersistentVolumeClaim'
import { Secret } from 'kubernetes-models/v1/Secret'
import { Service } from 'kubernetes-models/v1/Service'
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount'

type ModelClass = { new (data: never): { validate(): void }; apiVersion: string; kind: string }

const MODELS: ModelClass[] = [
  Deployment,
  Service,
  ConfigMap,
  Secret,
  PersistentVolumeClaim,
  ServiceAccount,
  Role,
  RoleBinding,
  Gateway,
  HTTPRoute,
]

/** `apiVersion kind` pairs that `validateManifest` has a schema for. */
export const VALIDATED_KINDS = new Set(MODELS.map((m) => `${m.apiVersion} ${m.kind}`))

/**
 * Validate one manifest against its kind's schema; throws naming the kind, the object and the
 * schema's complaint. An apiVersion/kind without a schema here is an error too.
 */
export function validateManifest(object: Record<string, unknown>): void {
  const model = MODELS.find((m) => m.apiVersion === object.apiVersion && m.kind === object.kind)
  const name = (object.metadata as { name?: string } | undefined)?.name
  if (!model) throw new Error(`no schema for ${String(object.apiVersion)} ${String(object.kind)} (${name})`)
  try {
    new model(object as never).validate()
  } catch (err) {
    throw new Error(`${model.kind} ${name}: ${(err as Error).message}`, { cause: err })
  }
}
