//! The machine a run measured: CPU model, cores and memory, as the
//! benchmarks print them beside their results (a figure means little
//! without the machine that gave it). Apart from the benches because every
//! command that prints a `RESULT` line says it the same way.

/// /proc/cpuinfo; empty where it cannot be read (not Linux): no model
/// found, no CPU flag.
pub fn cpuinfo() -> String {
    std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default()
}

/// The first `model name` of /proc/cpuinfo.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

/// The cores this process may use (0 when unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, usize::from)
}

/// `<CPU model>, <n> cores`, the CPU `unknown CPU` where cpuinfo names none.
pub fn cpu_and_cores(cpuinfo: &str) -> String {
    format!("{}, {} cores", cpu_model(cpuinfo).unwrap_or_else(|| "unknown CPU".to_owned()), cores())
}

/// MemTotal of /proc/meminfo, in GiB.
pub fn memory_total() -> Option<String> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: f64 = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(format!("{:.0} GiB", kib / 1024.0 / 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_model_is_the_first_model_name() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(cpu_model("processor : 0\n"), None);
    }
}
