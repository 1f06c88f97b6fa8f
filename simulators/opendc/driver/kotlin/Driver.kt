/*
 * WhatIf-Bench's OpenDC driver: runs OpenDC 2.0's compute service on a rack of hosts and a set of
 * trace VMs, under OpenDC's own simulated clock, and writes the mean of each series over every
 * window (300 s by default).
 *
 * Usage: java -jar driver.jar --input DIR --output DIR --windows N [--window-ms 300000]
 *   DIR/hosts.csv      name,core_count,core_speed_mhz,memory_mb,idle_power_w,max_power_w
 *   DIR/vms.csv        vm,cores,memory_mb,host      (host: where OpenDC's ReplayScheduler puts it)
 *   DIR/fragments.csv  vm,duration_ms,cpu_usage_mhz,cores   (in replay order, per VM)
 * Writes OUT/hosts.csv, OUT/vms.csv and OUT/run.properties, then prints "done" on stdout.
 * Progress goes to stderr as "progress K N" lines (K of N windows simulated); every failure ends
 * the program with exit code 2 and one "error: ..." line on stderr.
 *
 * What OpenDC computes and what the driver only reads (see the wrapper's docs):
 *   - hosts: SimHost with a SimFairShareHypervisor and LinearPowerModel(max, idle); the driver
 *     reads the bare-metal machine's per-core speeds (MHz), its usage (the fraction of its
 *     capacity in use) and its power draw (W).
 *   - VMs: SimTraceWorkload fragments, wrapped so the driver sees each vCPU's speed as OpenDC's
 *     own SimSpeedConsumerAdapter reports it (min of the vCPU's capacity and its command's limit)
 *     and the limit of each command (the demand). Where a host cannot give its VMs that much
 *     (overcommitted), OpenDC 2.0 keeps each VM's fair share private: the run is refused.
 *   - placement: OpenDC's ReplayScheduler; the driver checks that every VM ran where asked, that
 *     none went into ERROR, and that each ended its trace when its fragments say.
 * Every value is piecewise constant between fragment boundaries, which all lie on a grid of g ms
 * from the common start t0 (g = gcd of the fragment durations and the window length). Reading the
 * state once in the middle of every grid cell and averaging per window gives the exact window
 * mean of the piecewise-constant signals, with no reads at instants where OpenDC updates them.
 */
package org.whatifbench.opendc

import io.opentelemetry.api.metrics.MeterProvider
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.delay
import kotlinx.coroutines.withTimeoutOrNull
import org.opendc.compute.api.Server
import org.opendc.compute.api.ServerState
import org.opendc.compute.api.ServerWatcher
import org.opendc.compute.service.ComputeService
import org.opendc.compute.service.scheduler.ReplayScheduler
import org.opendc.compute.simulator.SimHost
import org.opendc.simulator.compute.SimFairShareHypervisorProvider
import org.opendc.simulator.compute.SimMachineContext
import org.opendc.simulator.compute.SimMachineModel
import org.opendc.simulator.compute.model.MemoryUnit
import org.opendc.simulator.compute.model.ProcessingNode
import org.opendc.simulator.compute.model.ProcessingUnit
import org.opendc.simulator.compute.power.LinearPowerModel
import org.opendc.simulator.compute.workload.SimTraceWorkload
import org.opendc.simulator.compute.workload.SimWorkload
import org.opendc.simulator.core.runBlockingSimulation
import org.opendc.simulator.resources.SimResourceCommand
import org.opendc.simulator.resources.SimResourceConsumer
import org.opendc.simulator.resources.SimResourceContext
import org.opendc.simulator.resources.consumer.SimSpeedConsumerAdapter
import java.io.File
import java.util.Locale
import java.util.UUID
import kotlin.math.abs
import kotlin.system.exitProcess

const val DRIVER_VERSION = 1

class DriverError(message: String) : Exception(message)

data class HostSpec(
    val name: String,
    val coreCount: Int,
    val coreSpeedMhz: Double,
    val memoryMb: Long,
    val idlePowerW: Double,
    val maxPowerW: Double,
)

data class VmSpec(val id: String, val cores: Int, val memoryMb: Long, val host: String)

/** One trace VM: OpenDC's trace workload, with taps on each vCPU's granted speed and demand. */
class TappedWorkload(
    val vm: String,
    fragments: List<SimTraceWorkload.Fragment>,
    private val onStarted: () -> Unit,
) : SimWorkload {
    private val trace = SimTraceWorkload(fragments.asSequence())
    /** When the trace's replay ends: its start plus the fragments' durations (ms). */
    val replayMs = fragments.sumOf { it.duration }
    var startedAtMs = -1L
        private set
    /** When OpenDC asked the first vCPU for a command past the last fragment (-1: not yet). */
    var exitedAtMs = -1L
        private set
    var hostName = ""
        private set
    /** Granted speed of each vCPU in MHz (OpenDC's SimSpeedConsumerAdapter reports it). */
    var speeds = DoubleArray(0)
        private set
    /** Limit of each vCPU's current command in MHz: the demand (0 while idle or done). */
    var demands = DoubleArray(0)
        private set
    /** Capacity of each vCPU in MHz (OpenDC copies the host's core speed). */
    var vcpuCapacityMhz = DoubleArray(0)
        private set

    override fun onStart(ctx: SimMachineContext) {
        trace.onStart(ctx)
        startedAtMs = ctx.clock.millis()
        hostName = (ctx.meta["driver"] as? SimHost)?.name ?: ""
        speeds = DoubleArray(ctx.cpus.size)
        demands = DoubleArray(ctx.cpus.size)
        vcpuCapacityMhz = DoubleArray(ctx.cpus.size) { ctx.cpus[it].model.frequency }
        onStarted()
    }

    override fun getConsumer(ctx: SimMachineContext, cpu: ProcessingUnit): SimResourceConsumer {
        val inner = trace.getConsumer(ctx, cpu)
        val demandTap = object : SimResourceConsumer by inner {
            override fun onNext(ctx: SimResourceContext): SimResourceCommand {
                val command = inner.onNext(ctx)
                demands[cpu.id] = if (command is SimResourceCommand.Consume) command.limit else 0.0
                if (command is SimResourceCommand.Exit && exitedAtMs < 0) exitedAtMs = ctx.clock.millis()
                return command
            }
        }
        return SimSpeedConsumerAdapter(demandTap) { speed -> speeds[cpu.id] = speed }
    }
}

/** Window sums of one series; each window's mean is its sum over its number of reads. */
class WindowMeans(windows: Int) {
    private val sums = DoubleArray(windows)
    private val counts = IntArray(windows)

    fun add(window: Int, value: Double) {
        sums[window] += value
        counts[window] += 1
    }

    fun mean(window: Int): Double = sums[window] / counts[window]
}

fun readTable(file: File, header: List<String>): List<List<String>> {
    if (!file.isFile) throw DriverError("$file: input table not found")
    val lines = file.readLines().filter { it.isNotBlank() }
    if (lines.isEmpty() || lines[0].split(",").map { it.trim() } != header) {
        throw DriverError("$file: expected the header ${header.joinToString(",")}")
    }
    return lines.drop(1).mapIndexed { index, line ->
        val cells = line.split(",").map { it.trim() }
        if (cells.size != header.size) {
            throw DriverError("$file line ${index + 2}: expected ${header.size} fields, got ${cells.size}")
        }
        cells
    }
}

fun <T> parse(file: File, row: Int, what: String, text: String, convert: (String) -> T?): T =
    convert(text) ?: throw DriverError("$file line ${row + 2}: $what is not valid: '$text'")

fun readHosts(file: File): List<HostSpec> =
    readTable(file, listOf("name", "core_count", "core_speed_mhz", "memory_mb", "idle_power_w", "max_power_w"))
        .mapIndexed { i, c ->
            val spec = HostSpec(
                name = c[0],
                coreCount = parse(file, i, "core_count", c[1]) { it.toIntOrNull() },
                coreSpeedMhz = parse(file, i, "core_speed_mhz", c[2]) { it.toDoubleOrNull() },
                memoryMb = parse(file, i, "memory_mb", c[3]) { it.toLongOrNull() },
                idlePowerW = parse(file, i, "idle_power_w", c[4]) { it.toDoubleOrNull() },
                maxPowerW = parse(file, i, "max_power_w", c[5]) { it.toDoubleOrNull() },
            )
            val finite = listOf(spec.coreSpeedMhz, spec.idlePowerW, spec.maxPowerW).all { it.isFinite() }
            if (!finite || spec.coreCount < 1 || !(spec.coreSpeedMhz > 0.0) || spec.memoryMb < 1 ||
                !(spec.idlePowerW >= 0.0) || !(spec.maxPowerW >= spec.idlePowerW)
            ) {
                throw DriverError("$file line ${i + 2}: host ${spec.name} has an impossible setting: $spec")
            }
            spec
        }

fun readVms(file: File): List<VmSpec> =
    readTable(file, listOf("vm", "cores", "memory_mb", "host")).mapIndexed { i, c ->
        VmSpec(
            id = c[0],
            cores = parse(file, i, "cores", c[1]) { it.toIntOrNull()?.takeIf { n -> n >= 1 } },
            memoryMb = parse(file, i, "memory_mb", c[2]) { it.toLongOrNull()?.takeIf { n -> n >= 0 } },
            host = c[3],
        )
    }

fun readFragments(file: File, vms: List<VmSpec>): Map<String, List<SimTraceWorkload.Fragment>> {
    val byVm = vms.associate { it.id to mutableListOf<SimTraceWorkload.Fragment>() }
    readTable(file, listOf("vm", "duration_ms", "cpu_usage_mhz", "cores")).forEachIndexed { i, c ->
        val list = byVm[c[0]] ?: throw DriverError("$file line ${i + 2}: VM ${c[0]} is not in vms.csv")
        val duration = parse(file, i, "duration_ms", c[1]) { it.toLongOrNull()?.takeIf { d -> d > 0 && d % 1000 == 0L } }
        val usage = parse(file, i, "cpu_usage_mhz", c[2]) { it.toDoubleOrNull()?.takeIf { u -> u >= 0.0 && u.isFinite() } }
        val cores = parse(file, i, "cores", c[3]) { it.toIntOrNull()?.takeIf { n -> n >= 1 } }
        list.add(SimTraceWorkload.Fragment(duration, usage, cores))
    }
    for ((vm, list) in byVm) if (list.isEmpty()) throw DriverError("$file: VM $vm has no fragments")
    return byVm
}

fun gcd(a: Long, b: Long): Long = if (b == 0L) a else gcd(b, a % b)

fun format(value: Double): String = value.toString()

fun run(input: File, output: File, windows: Int, windowMs: Long) {
    val hostSpecs = readHosts(File(input, "hosts.csv"))
    val vmSpecs = readVms(File(input, "vms.csv"))
    val fragments = readFragments(File(input, "fragments.csv"), vmSpecs)
    val hostNames = hostSpecs.map { it.name }
    if (hostNames.toSet().size != hostNames.size) throw DriverError("hosts.csv: host names repeat")
    for (vm in vmSpecs) {
        if (vm.host !in hostNames) throw DriverError("vms.csv: VM ${vm.id} is placed on unknown host ${vm.host}")
    }
    // OpenDC's ReplayScheduler picks hosts whose name *contains* the placement: exact only when
    // no host name is a part of another's
    for (a in hostNames) for (b in hostNames) {
        if (a != b && b.contains(a)) throw DriverError("hosts.csv: host name $a is part of $b")
    }
    var grid = windowMs
    for (list in fragments.values) for (f in list) grid = gcd(grid, f.duration)
    val samplesPerWindow = (windowMs / grid).toInt()

    val allStarted = CompletableDeferred<Unit>()
    var started = 0
    val workloads = vmSpecs.map { spec ->
        TappedWorkload(spec.id, fragments.getValue(spec.id)) {
            started += 1
            if (started == vmSpecs.size) allStarted.complete(Unit)
        }
    }
    val failures = mutableListOf<String>()
    val hostUsage = hostSpecs.map { WindowMeans(windows) }
    val hostDemand = hostSpecs.map { WindowMeans(windows) }
    val hostUtilisation = hostSpecs.map { WindowMeans(windows) }
    val hostPower = hostSpecs.map { WindowMeans(windows) }
    val vmUsage = vmSpecs.map { WindowMeans(windows) }
    val vmDemand = vmSpecs.map { WindowMeans(windows) }
    var startMs = 0L
    var vmCapacity = DoubleArray(vmSpecs.size)

    runBlockingSimulation {
        val meter = MeterProvider.noop().get("whatif-opendc-driver")
        val hosts = hostSpecs.mapIndexed { index, spec ->
            val node = ProcessingNode("whatif", "x86_64", "whatif-core", spec.coreCount)
            val model = SimMachineModel(
                cpus = List(spec.coreCount) { ProcessingUnit(node, it, spec.coreSpeedMhz) },
                memory = listOf(MemoryUnit("whatif", "whatif-memory", 3200.0, spec.memoryMb)),
            )
            SimHost(
                UUID(0L, index.toLong()), spec.name, model, emptyMap(), coroutineContext, clock, meter,
                SimFairShareHypervisorProvider(), LinearPowerModel(spec.maxPowerW, spec.idlePowerW),
            )
        }
        val service = ComputeService(coroutineContext, clock, meter, ReplayScheduler(vmSpecs.associate { it.id to it.host }))
        hosts.forEach { service.addHost(it) }
        val client = service.newClient()
        try {
            val image = client.newImage("whatif-vm-image")
            val watcher = object : ServerWatcher {
                override fun onStateChanged(server: Server, newState: ServerState) {
                    if (newState == ServerState.ERROR) failures.add(server.name)
                }
            }
            for ((spec, workload) in vmSpecs.zip(workloads)) {
                val flavor = client.newFlavor(spec.id, spec.cores, spec.memoryMb)
                client.newServer(spec.id, image, flavor, meta = mapOf("workload" to workload)).watch(watcher)
            }
            // OpenDC schedules on its 300 000 ms quantum and boots a guest in 1 ms
            withTimeoutOrNull(10 * 300_000L) { allStarted.await() } ?: run {
                val stuck = workloads.filter { it.startedAtMs < 0 }.joinToString(", ") { it.vm }
                throw DriverError("OpenDC did not start VM(s) $stuck: no host could take them")
            }
            startMs = workloads.first().startedAtMs
            for ((spec, workload) in vmSpecs.zip(workloads)) {
                if (workload.startedAtMs != startMs) {
                    throw DriverError("VM ${spec.id} started at ${workload.startedAtMs} ms, not with the others at $startMs ms")
                }
                if (workload.hostName != spec.host) {
                    throw DriverError("OpenDC placed VM ${spec.id} on ${workload.hostName}, not on ${spec.host}")
                }
            }
            vmCapacity = DoubleArray(vmSpecs.size) { workloads[it].vcpuCapacityMhz.sum() }
            val vmIndices = hostSpecs.map { host -> vmSpecs.indices.filter { vmSpecs[it].host == host.name } }
            val total = windows.toLong() * samplesPerWindow
            for (sample in 0 until total) {
                val at = startMs + sample * grid + grid / 2
                check(at > clock.millis()) { "sample $sample at $at ms is not after ${clock.millis()} ms" }
                delay(at - clock.millis())
                if (failures.isNotEmpty()) throw DriverError("OpenDC reports VM(s) ${failures.joinToString(", ")} in ERROR")
                val window = (sample / samplesPerWindow).toInt()
                for ((h, host) in hosts.withIndex()) {
                    val utilisation = host.machine.usage.value
                    val usage = host.machine.speed.sum()
                    // A VM's granted speed is min(its vCPUs' capacity, its demand); OpenDC 2.0 keeps
                    // the fair share an overcommitted host grants each VM private, so a host whose
                    // VMs get less than that is refused rather than reported wrongly.
                    val granted = vmIndices[h].sumOf { workloads[it].speeds.sum() }
                    if (abs(granted - usage) > 1e-9 * maxOf(1.0, usage)) {
                        throw DriverError(
                            "host ${hostSpecs[h].name} is overcommitted at $at ms: its VMs are granted " +
                                "$granted MHz in all but it runs $usage MHz (OpenDC 2.0 does not expose " +
                                "each VM's fair share)",
                        )
                    }
                    hostUtilisation[h].add(window, utilisation)
                    hostUsage[h].add(window, usage)
                    hostPower[h].add(window, host.machine.powerDraw)
                    hostDemand[h].add(window, vmIndices[h].sumOf { workloads[it].demands.sum() })
                }
                for ((v, workload) in workloads.withIndex()) {
                    vmUsage[v].add(window, workload.speeds.sum())
                    vmDemand[v].add(window, workload.demands.sum())
                }
                if ((sample + 1) % (288L * samplesPerWindow) == 0L || sample + 1 == total) {
                    System.err.println("progress ${window + 1} $windows")
                }
            }
            // the wrapper cuts every VM's trace at the end of the last window
            delay(startMs + windows * windowMs + 1 - clock.millis())
            if (failures.isNotEmpty()) throw DriverError("OpenDC reports VM(s) ${failures.joinToString(", ")} in ERROR")
            for (w in workloads) {
                if (w.exitedAtMs != startMs + w.replayMs) {
                    throw DriverError(
                        "VM ${w.vm} ended its trace at ${w.exitedAtMs} ms, not at ${startMs + w.replayMs} ms " +
                            "(its start plus its fragments)",
                    )
                }
            }
        } finally {
            client.close()
            service.close()
            hosts.forEach { it.close() }
        }
    }

    output.mkdirs()
    File(output, "hosts.csv").bufferedWriter().use { out ->
        out.write("host,window,cpu_usage_mhz,cpu_demand_mhz,cpu_utilization,power_draw_w\n")
        for ((h, spec) in hostSpecs.withIndex()) for (k in 0 until windows) {
            out.write("${spec.name},$k,${format(hostUsage[h].mean(k))},${format(hostDemand[h].mean(k))},")
            out.write("${format(hostUtilisation[h].mean(k))},${format(hostPower[h].mean(k))}\n")
        }
    }
    File(output, "vms.csv").bufferedWriter().use { out ->
        out.write("vm,window,cpu_usage_mhz,cpu_demand_mhz,capacity_mhz\n")
        for ((v, spec) in vmSpecs.withIndex()) for (k in 0 until windows) {
            out.write("${spec.id},$k,${format(vmUsage[v].mean(k))},${format(vmDemand[v].mean(k))},${format(vmCapacity[v])}\n")
        }
    }
    File(output, "run.properties").writeText(
        "driver_version=$DRIVER_VERSION\nstart_ms=$startMs\ngrid_ms=$grid\nwindows=$windows\nwindow_ms=$windowMs\n" +
            vmSpecs.zip(workloads).joinToString("") { (spec, w) -> "placement.${spec.id}=${w.hostName}\n" },
    )
}

fun main(args: Array<String>) {
    Locale.setDefault(Locale.ROOT)
    try {
        val usage = "usage: --input DIR --output DIR --windows N [--window-ms MS]"
        val known = setOf("--input", "--output", "--windows", "--window-ms")
        val pairs = args.toList().chunked(2)
        if (pairs.any { it.size != 2 || it[0] !in known } || pairs.map { it[0] }.toSet().size != pairs.size) {
            throw DriverError(usage)
        }
        val options = pairs.associate { it[0] to it[1] }
        val input = File(options["--input"] ?: throw DriverError("--input DIR is required"))
        val output = File(options["--output"] ?: throw DriverError("--output DIR is required"))
        val windows = options["--windows"]?.toIntOrNull()?.takeIf { it >= 1 }
            ?: throw DriverError("--windows N (a whole number >= 1) is required")
        val windowMs = (options["--window-ms"] ?: "300000").toLongOrNull()?.takeIf { it >= 2000 && it % 1000 == 0L }
            ?: throw DriverError("--window-ms must be a whole number of seconds (in ms), at least 2000")
        run(input, output, windows, windowMs)
        println("done")
    } catch (error: DriverError) {
        System.err.println("error: ${error.message}")
        exitProcess(2)
    } catch (error: Throwable) {
        val message = (error.message ?: "no message").replace(Regex("\\s+"), " ").take(500)
        System.err.println("error: the OpenDC run failed: ${error.javaClass.name}: $message")
        exitProcess(2)
    }
}
