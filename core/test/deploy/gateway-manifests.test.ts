// deploy/gateway: the InferencePool, the endpoint picker (EPP) and the Gateway + HTTPRoute for
// routing to Loom through the Gateway API Inference Extension. Kubernetes and Gateway API objects
// are validated against kubernetes-models' schemas. No installed package carries the InferencePool
// CRD or the EPP's config schema, so those are checked by structure here: the InferencePool
// against the rules of the v1 CRD (inference.networking.k8s.io_inferencepools.yaml, release
// v1.5.0), the EndpointPickerConfig against the plugin types and parameters of EPP v1.5.0.
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { IHTTPRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute'
import type { IDeployment } from 'kubernetes-models/apps/v1/Deployment'
import type { IService } from 'kubernetes-models/v1/Service'
import t from 'tap'
import { parse as parseYaml, parseAllDocuments } from 'yaml'
import { renderChart } from './helm-template-subset.ts'
import { validateManifest } from './kubernetes-schemas.ts'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')

type Manifest = Record<string, unknown> & { apiVersion: string; kind: string; metadata: { name: string } }

function load(file: string): Manifest[] {
  return parseAllDocuments(readFileSync(path.join(root, 'deploy/gateway', file), 'utf8'))
    .map((d) => {
      if (d.errors.length > 0) throw new Error(`${file}: ${d.errors[0]!.message}`)
      return d.toJS() as Manifest | null
    })
    .filter((o): o is Manifest => o !== null)
}

const manifests = ['inference-pool.yaml', 'endpoint-picker.yaml', 'gateway.yaml'].flatMap((f) =>
  load(f).map((object) => ({ file: f, object })),
)
const find = <T>(kind: string, name?: string): T => {
  const found = manifests.find((m) => m.object.kind === kind && (name === undefined || m.object.metadata.name === name))
  if (!found) throw new Error(`no ${kind} ${name ?? ''}`)
  return found.object as unknown as T
}

/** The series the extension's model-server protocol names, as Loom exports them (vLLM's spelling). */
const LOOM_GATEWAY_METRICS = {
  queued: 'vllm:num_requests_waiting',
  running: 'vllm:num_requests_running',
  kvUsage: 'vllm:kv_cache_usage_perc',
  lora: 'vllm:lora_requests_info',
}

/** The flags of EPP v1.5.0 (pkg/epp/server/options.go, logging options, controller-runtime's zap). */
const EPP_FLAGS = new Set([
  'grpc-port',
  'grpc-health-port',
  'pool-name',
  'pool-namespace',
  'pool-group',
  'endpoint-selector',
  'endpoint-target-ports',
  'config-file',
  'config-text',
  'metrics-port',
  'metrics-endpoint-auth',
  'secure-serving',
  'cert-path',
  'enable-cert-reload',
  'health-checking',
  'ha-enable-leader-election',
  'tracing',
  'enable-pprof',
  'refresh-metrics-interval',
  'refresh-prometheus-metrics-interval',
  'metrics-staleness-threshold',
  'v',
  'zap-encoder',
  'zap-log-level',
  'zap-devel',
])
/** Flags v1.5.0 refuses at start ("configure metrics via engineConfigs in EndpointPickerConfig instead"). */
const EPP_REFUSED_FLAGS = [
  'total-queued-requests-metric',
  'total-running-requests-metric',
  'kv-cache-usage-percentage-metric',
  'lora-info-metric',
  'cache-info-metric',
]
/** Plugin types registered by EPP v1.5.0 that this config may use. */
const EPP_PLUGIN_TYPES = new Set([
  'metrics-data-source',
  'core-metrics-extractor',
  'queue-scorer',
  'kv-cache-utilization-scorer',
  'lora-affinity-scorer',
  'prefix-cache-scorer',
  'running-requests-size-scorer',
  'max-score-picker',
  'random-picker',
  'weighted-random-picker',
  'single-profile-handler',
  'openai-parser',
])

t.test('Kubernetes and Gateway API objects match their schemas', async (t) => {
  for (const { file, object } of manifests) {
    if (object.kind === 'InferencePool') continue
    t.doesNotThrow(() => validateManifest(object), `${file}: ${object.kind} ${object.metadata.name}`)
  }
})

interface InferencePool {
  apiVersion: string
  kind: string
  metadata: { name: string }
  spec: {
    selector: { matchLabels: Record<string, string> }
    targetPorts: { number: number }[]
    appProtocol?: string
    endpointPickerRef: {
      group?: string
      kind?: string
      name: string
      port?: { number: number }
      failureMode?: string
    }
  }
}

t.test('the InferencePool follows the v1 CRD', async (t) => {
  const pool = find<InferencePool>('InferencePool')
  t.equal(pool.apiVersion, 'inference.networking.k8s.io/v1', 'the GA group and version')
  t.same(
    Object.keys(pool.spec).sort(),
    ['appProtocol', 'endpointPickerRef', 'selector', 'targetPorts'],
    'only fields the CRD declares, the required three among them',
  )
  const labels = pool.spec.selector.matchLabels
  const labelCount = Object.keys(labels).length
  t.ok(labelCount >= 1 && labelCount <= 64, 'matchLabels: 1 to 64 labels')
  t.same(Object.keys(pool.spec.selector), ['matchLabels'], 'matchLabels only (no matchExpressions in the CRD)')
  for (const value of Object.values(labels)) {
    t.match(value, /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/, `label value ${value}`)
    t.ok(value.length <= 63)
  }
  const ports = pool.spec.targetPorts.map((p) => p.number)
  t.ok(ports.length >= 1 && ports.length <= 8, 'targetPorts: 1 to 8')
  t.equal(new Set(ports).size, ports.length, 'port numbers unique')
  for (const p of ports) t.ok(Number.isInteger(p) && p >= 1 && p <= 65535, `port ${p}`)
  t.ok(['http', 'kubernetes.io/h2c'].includes(pool.spec.appProtocol!), 'appProtocol from the enum')
  const ref = pool.spec.endpointPickerRef
  t.same(Object.keys(ref).sort(), ['failureMode', 'name', 'port'], 'endpointPickerRef fields')
  t.ok(ref.name.length >= 1 && ref.name.length <= 253)
  t.ok(ref.port, "port is required when kind is 'Service' or unspecified")
  t.ok(['FailOpen', 'FailClose'].includes(ref.failureMode!), 'failureMode from the enum')
})

t.test('the pool selects the Helm chart pods on their port', async (t) => {
  const pool = find<InferencePool>('InferencePool')
  // The README installs the chart as release `loom`.
  const chart = renderChart(path.join(root, 'deploy/helm/loom'), { release: 'loom' })
  const deployment = chart.find((o) => o.object.kind === 'Deployment')!.object as unknown as IDeployment
  const podLabels = deployment.spec!.template.metadata!.labels!
  for (const [key, value] of Object.entries(pool.spec.selector.matchLabels)) {
    t.equal(podLabels[key], value, `pods carry ${key}=${value}`)
  }
  const container = deployment.spec!.template.spec!.containers[0]!
  t.same(
    pool.spec.targetPorts.map((p) => p.number),
    [container.ports!.find((p) => p.name === 'http')!.containerPort],
    "targetPorts is the server's port",
  )
  t.equal(podLabels['inference.networking.k8s.io/engine-type'], 'loom', 'the pods name their engine for the EPP')
})

t.test('the endpoint picker is reachable where the pool says', async (t) => {
  const pool = find<InferencePool>('InferencePool')
  const service = find<IService>('Service', pool.spec.endpointPickerRef.name)
  const port = service.spec!.ports!.find((p) => p.port === pool.spec.endpointPickerRef.port!.number)
  t.ok(port, 'the Service has the ext-proc port')
  const deployment = find<IDeployment>('Deployment', 'loom-epp')
  for (const [key, value] of Object.entries(service.spec!.selector!)) {
    t.equal(deployment.spec!.template.metadata!.labels![key], value, 'the Service selects the EPP pods')
  }
  const container = deployment.spec!.template.spec!.containers[0]!
  t.ok(
    container.ports!.some((p) => p.containerPort === port!.port),
    'the EPP listens on it',
  )

  const args = container.args!
  const flags = args.filter((a) => a.startsWith('--')).map((a) => a.slice(2).split('=')[0]!)
  for (const flag of flags) t.ok(EPP_FLAGS.has(flag), `--${flag} is an EPP v1.5.0 flag`)
  for (const flag of EPP_REFUSED_FLAGS) t.notOk(flags.includes(flag), `--${flag} (refused by v1.5.0) is not used`)
  const value = (flag: string) => args[args.indexOf(`--${flag}`) + 1]
  t.equal(value('pool-name'), pool.metadata.name, '--pool-name is the pool')
  t.equal(value('pool-group'), 'inference.networking.k8s.io', "--pool-group is the pool's API group")
  t.match(container.image!, /^registry\.k8s\.io\/gateway-api-inference-extension\/epp:v1\.5\.0$/)
  const namespaceEnv = container.env!.find((e) => e.name === 'NAMESPACE')
  t.equal(namespaceEnv?.valueFrom?.fieldRef?.fieldPath, 'metadata.namespace', 'the pool namespace defaults to its own')

  const configFile = value('config-file')!
  const mount = container.volumeMounts!.find((m) => configFile.startsWith(`${m.mountPath}/`))!
  const volume = deployment.spec!.template.spec!.volumes!.find((v) => v.name === mount.name)!
  const configMap = find<{ data: Record<string, string> }>('ConfigMap', volume.configMap!.name)
  t.ok(configMap.data[path.posix.basename(configFile)], '--config-file is in the mounted ConfigMap')

  const role = find<{ rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[] }>('Role', 'loom-epp')
  const can = (group: string, resource: string) =>
    role.rules.some((r) => r.apiGroups.includes(group) && r.resources.includes(resource) && r.verbs.includes('watch'))
  t.ok(can('', 'pods'), 'the EPP may watch pods')
  t.ok(can('inference.networking.k8s.io', 'inferencepools'), 'and InferencePools')
  t.equal(deployment.spec!.template.spec!.serviceAccountName, 'loom-epp')
})

interface PickerConfig {
  apiVersion: string
  kind: string
  plugins: { type: string; name?: string; parameters?: Record<string, unknown> }[]
  schedulingProfiles: { name: string; plugins: { pluginRef: string; weight?: number }[] }[]
}

t.test("the endpoint picker reads Loom's metrics", async (t) => {
  const configMap = find<{ data: Record<string, string> }>('ConfigMap', 'loom-epp')
  const config = parseYaml(configMap.data['loom.yaml']!) as PickerConfig
  t.equal(config.apiVersion, 'inference.networking.x-k8s.io/v1alpha1')
  t.equal(config.kind, 'EndpointPickerConfig')
  const names = new Set<string>()
  for (const plugin of config.plugins) {
    t.ok(EPP_PLUGIN_TYPES.has(plugin.type), `${plugin.type} is an EPP plugin type`)
    names.add(plugin.name ?? plugin.type)
  }
  t.equal(names.size, config.plugins.length, 'plugin names are unique')
  for (const profile of config.schedulingProfiles) {
    for (const ref of profile.plugins) t.ok(names.has(ref.pluginRef), `profile ${profile.name} uses ${ref.pluginRef}`)
  }
  t.ok(
    config.schedulingProfiles[0]!.plugins.some((p) => p.pluginRef === 'lora-affinity-scorer'),
    'requests go where their adapter already runs',
  )

  const source = config.plugins.find((p) => p.type === 'metrics-data-source')!
  t.same(source.parameters, { scheme: 'http', path: '/metrics' }, 'scrapes GET /metrics over plain HTTP')
  const extractor = config.plugins.find((p) => p.type === 'core-metrics-extractor')!
  const params = extractor.parameters as {
    defaultEngine: string
    engineConfigs: Record<string, string>[]
  }
  const engine = params.engineConfigs.find((e) => e.name === params.defaultEngine)
  t.ok(engine, 'the default engine is defined')
  t.same(
    engine,
    {
      name: 'loom',
      queuedRequestsSpec: LOOM_GATEWAY_METRICS.queued,
      runningRequestsSpec: LOOM_GATEWAY_METRICS.running,
      kvUsageSpec: LOOM_GATEWAY_METRICS.kvUsage,
      loraSpec: LOOM_GATEWAY_METRICS.lora,
      cacheInfoSpec: '',
    },
    "the series Loom exports, and no cache-info series (Loom has none, and '' turns it off)",
  )
  t.not(engine!.name, 'default', "'default' is reserved by the extractor")
})

t.test('the HTTPRoute sends to the InferencePool through the Gateway', async (t) => {
  const route = find<IHTTPRoute>('HTTPRoute')
  const gateway = find<{ metadata: { name: string } }>('Gateway')
  const pool = find<InferencePool>('InferencePool')
  t.same(route.spec!.parentRefs, [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: gateway.metadata.name }])
  const rule = route.spec!.rules![0]!
  t.same(rule.backendRefs, [{ group: 'inference.networking.k8s.io', kind: 'InferencePool', name: pool.metadata.name }])
  t.same(rule.matches, [{ path: { type: 'PathPrefix', value: '/' } }], 'every route of the server')
  t.match(rule.timeouts?.request ?? '', /^\d+s$/, 'a request timeout long enough for generations')
})
