"""`tfps launch`'s settings, typed: one LaunchConfig, made once from the command line
(LaunchConfig.from_args, which reads the job's config) or in Python, and checked once."""
import dataclasses
from typing import Optional, Tuple


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """A local PS/worker job (tfps.cluster.launch.launch): `tfps train --config config` with the
    `overrides` (`--set` items) in num_ps PS tasks, num_workers trainers (the chief included) and,
    with evaluator, an evaluator task; model_dir (None: a new temporary directory); at most
    max_restarts restarts of dead tasks in the whole job; the tasks' gRPC servers on host; a status
    line every status_every seconds. latency_ms > 0: a relay delays each direction between the
    trainers and every PS by that much. netns: every task an emulated host (its own network
    namespace), its link shaped to bandwidth_gbit each way when given."""
    config: Optional[str] = None
    overrides: Tuple[str, ...] = ()
    num_ps: int = 1
    num_workers: int = 1
    model_dir: Optional[str] = None
    evaluator: bool = False
    max_restarts: int = 3
    host: str = "127.0.0.1"
    status_every: float = 5.0
    latency_ms: float = 0.0
    netns: bool = False
    bandwidth_gbit: Optional[float] = None

    def problems(self):
        """[what is wrong, naming the flag or config field], empty when the job can start."""
        out = []
        if self.num_ps < 1:
            out.append(f"--ps must be >= 1 (embedding tables live on PS tasks), got {self.num_ps}")
        if self.num_workers < 1:
            out.append(f"--workers must be >= 1, got {self.num_workers}")
        if self.max_restarts < 0:
            out.append(f"--max-restarts must be >= 0, got {self.max_restarts}")
        if self.bandwidth_gbit is not None and not self.netns:
            out.append("cluster.emulated_bandwidth_gbit needs cluster.netns (tbf shapes each task's own link, which "
                       "only emulated hosts have)")
        return out

    def checked(self):
        """This config, or ValueError naming every problem."""
        problems = self.problems()
        if problems:
            raise ValueError("launch: " + "; ".join(problems))
        return self

    def num_tasks(self):
        """The tasks the job starts (the latency relay counted as one)."""
        return self.num_ps + self.num_workers + (1 if self.evaluator else 0) + (1 if self.latency_ms else 0)

    @classmethod
    def from_args(cls, args, cfg):
        """The LaunchConfig of `tfps launch`'s parsed flags and the job's loaded config `cfg`
        (tfps.config.load_config of args.config with the overrides from_args names: args.set,
        then --protocol and --netns as cluster fields)."""
        return cls(config=args.config, overrides=tuple(cls.overrides_of(args)), num_ps=args.ps,
                   num_workers=args.workers, model_dir=cfg.model_dir, evaluator=args.evaluator,
                   max_restarts=args.max_restarts, host=cfg.cluster.host, latency_ms=cfg.cluster.emulated_latency_ms,
                   netns=cfg.cluster.netns, bandwidth_gbit=cfg.cluster.emulated_bandwidth_gbit).checked()

    @staticmethod
    def overrides_of(args):
        """The `--set` items of `tfps launch`'s flags, --protocol and --netns among them."""
        return (list(args.set) + ([f"cluster.protocol={args.protocol}"] if args.protocol else [])
                + (["cluster.netns=true"] if args.netns else []))
