"""Example TensorFlow trainer with a Vertex AI custom-job contract.

This is *user code*: it knows nothing about the launcher.  Everything it
learns about its environment comes from the environment variables Vertex AI
sets for a replica:

``TF_CONFIG``
    Cluster spec and this replica's task (``chief``/``master``, ``worker``,
    ``evaluator``).  With more than one task in the cluster the trainer uses
    ``tf.distribute.MultiWorkerMirroredStrategy``; otherwise
    ``tf.distribute.MirroredStrategy``.  Without ``TF_CONFIG`` the process is
    a single-replica chief.
``AIP_MODEL_DIR`` / ``AIP_CHECKPOINT_DIR`` / ``AIP_TENSORBOARD_LOG_DIR``
    Where the chief writes the exported SavedModel, the per-epoch
    ``tf.train.Checkpoint`` and TensorBoard scalars.  A ``file://`` prefix is
    accepted.  Non-chief replicas save to temporary directories they delete
    afterwards (saving may involve collectives, so every replica must save).
``CLOUD_ML_HP_METRIC_FILE`` / ``CLOUD_ML_TRIAL_ID``
    Used by ``cloudml-hypertune``: the chief reports the validation accuracy
    after every epoch with the tag ``accuracy``.

Training uses a custom loop (``strategy.experimental_distribute_dataset`` +
``strategy.run``) because Keras 3 ``model.fit`` fails under
MultiWorkerMirroredStrategy (keras-team/keras#20585).

Stdout carries one line per epoch (``epoch 1/3 loss=0.5200
val_accuracy=0.9100``) and, on the chief, ``final val_accuracy=0.9500``.

Test hook: ``--fail_if=EXPR`` where EXPR is ``<flag><op><number>`` with op in
``> >= < <= == !=`` (for example ``--fail_if=learning_rate>0.5``).  When the
condition holds for the parsed flags the trainer prints a message to stderr
and exits with status 3 before importing TensorFlow.

Run it with ``python -m trainer.task [flags]``.
"""

import argparse
import collections
import json
import operator
import os
import re
import shutil
import sys
import tempfile
import time

FAIL_IF_EXIT_CODE = 3
METRIC_TAG = "accuracy"
DEFAULT_METRIC_FILE = "/tmp/hypertune/output.metrics"

_FAIL_IF_RE = re.compile(r"^\s*([A-Za-z_]\w*)\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")
_OPS = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def _int_from_any(text):
    """int(float(text)): also accepts "64.0", as Vertex sends discrete values as floats."""
    try:
        return int(float(text))
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def _fail_if_expr(text):
    match = _FAIL_IF_RE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"expected <flag><op><number> with op in {' '.join(_OPS)}, got {text!r}"
        )
    name, op, number = match.groups()
    try:
        float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number in --fail_if: {number!r}") from None
    return name, op, float(number)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m trainer.task",
        description="Train a small conv net on the digits data set (Vertex-AI-style env contract).",
    )
    parser.add_argument("--learning_rate", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--num_units", type=_int_from_any, default=64)
    parser.add_argument("--epochs", type=_int_from_any, default=5)
    parser.add_argument(
        "--batch_size", type=_int_from_any, default=32, help="per-replica batch size"
    )
    parser.add_argument(
        "--dataset",
        default="digits",
        help="'digits' (sklearn, bundled) or a tensorflow_datasets image dataset name",
    )
    parser.add_argument("--seed", type=_int_from_any, default=0)
    parser.add_argument(
        "--fail_if",
        type=_fail_if_expr,
        default=None,
        metavar="EXPR",
        help=f"test hook: exit {FAIL_IF_EXIT_CODE} before training when EXPR (e.g. learning_rate>0.5) holds",
    )
    return parser


def parse_args(argv):
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(f"warning: ignoring unknown arguments: {' '.join(unknown)}", file=sys.stderr, flush=True)
    for name in ("num_units", "epochs", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.fail_if is not None and not hasattr(args, args.fail_if[0]):
        parser.error(f"--fail_if: unknown flag {args.fail_if[0]!r}")
    return args


def _fail_if_holds(args):
    if args.fail_if is None:
        return False
    name, op, number = args.fail_if
    value = getattr(args, name)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return False
    return _OPS[op](value, number)


# ---------------------------------------------------------------------------
# Environment (TF_CONFIG, AIP_* directories)
# ---------------------------------------------------------------------------


def _local_path(path):
    if path.startswith("file://"):
        path = path[len("file://"):]
    return path


def read_tf_config():
    """Return (cluster, task_type, task_index) from TF_CONFIG (empty -> ({}, None, 0))."""
    raw = os.environ.get("TF_CONFIG", "").strip()
    if not raw:
        return {}, None, 0
    config = json.loads(raw)
    cluster = config.get("cluster") or {}
    task = config.get("task") or {}
    return cluster, task.get("type"), int(task.get("index", 0) or 0)


def cluster_size(cluster):
    return sum(len(v) for k, v in cluster.items() if k != "evaluator")


def is_chief(cluster, task_type, task_index):
    if task_type is None:
        return True
    if task_type in ("chief", "master"):
        return True
    if task_type == "worker" and task_index == 0:
        return not any(cluster.get(k) for k in ("chief", "master"))
    return False


# ---------------------------------------------------------------------------
# Metric reporting
# ---------------------------------------------------------------------------


class MetricReporter:
    """Reports through cloudml-hypertune; writes the same format when it is missing.

    Constructed once per process: a new HyperTune instance truncates the file.
    """

    def __init__(self):
        path = os.environ.get("CLOUD_ML_HP_METRIC_FILE", DEFAULT_METRIC_FILE)
        if not os.path.dirname(path):
            # hypertune cannot handle a bare file name.
            path = os.path.abspath(path)
            os.environ["CLOUD_ML_HP_METRIC_FILE"] = path
        # hypertune uses os.makedirs without exist_ok; create it race-free here.
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        try:
            import hypertune  # cloudml-hypertune
        except ImportError:
            self._hypertune = None
            self._queue = collections.deque(maxlen=100)
            self._trial = os.environ.get("CLOUD_ML_TRIAL_ID", "0")
        else:
            self._hypertune = hypertune.HyperTune()

    def report(self, value, step):
        if self._hypertune is not None:
            self._hypertune.report_hyperparameter_tuning_metric(
                hyperparameter_metric_tag=METRIC_TAG,
                metric_value=value,
                global_step=step,
            )
            return
        self._queue.append(
            {
                "timestamp": time.time(),
                "trial": str(self._trial),
                METRIC_TAG: str(float(value)),
                "global_step": str(int(step) if step else 0),
                "checkpoint_path": "",
            }
        )
        with open(self.path, "w") as handle:
            for entry in self._queue:
                handle.write(json.dumps(entry, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------
# Data and model
# ---------------------------------------------------------------------------


def load_data(name, seed):
    """Return (x_train, y_train, x_val, y_val, num_classes) as numpy arrays."""
    import numpy as np
    from sklearn.model_selection import train_test_split

    if name == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = (digits.images / 16.0).astype("float32")[..., None]  # (n, 8, 8, 1)
        labels = digits.target.astype("int64")
        num_classes = 10
    else:
        try:
            import tensorflow_datasets as tfds
        except ImportError:
            raise SystemExit(  # noqa: B904 - the message is the whole story
                f"error: --dataset={name!r} needs the tensorflow_datasets package "
                "(pip install tensorflow-datasets); only 'digits' is built in"
            )
        data, info = tfds.load(name, split="train", as_supervised=True, batch_size=-1, with_info=True)
        images, labels = tfds.as_numpy(data)
        if images.ndim == 3:
            images = images[..., None]
        images = images.astype("float32")
        if images.max() > 1.0:
            images /= 255.0
        labels = labels.astype("int64")
        num_classes = int(info.features["label"].num_classes)

    x_train, x_val, y_train, y_val = train_test_split(
        images, labels, test_size=0.2, random_state=seed, stratify=labels
    )
    return (
        np.ascontiguousarray(x_train),
        np.ascontiguousarray(y_train),
        np.ascontiguousarray(x_val),
        np.ascontiguousarray(y_val),
        num_classes,
    )


def build_model(keras, input_shape, num_classes, num_units):
    return keras.Sequential(
        [
            keras.Input(shape=input_shape),
            keras.layers.Conv2D(max(1, num_units // 2), 3, padding="same", activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(num_units, activation="relu"),
            keras.layers.Dense(num_classes),
        ]
    )


def _export_model(tf, model, path):
    """Export a SavedModel (serving signature 'serve' / 'serving_default')."""
    if not hasattr(model, "export"):  # very old Keras
        tf.saved_model.save(model, path)
        return
    try:
        model.export(path, verbose=False)
    except TypeError:  # tf-keras: no verbose argument
        model.export(path)


def _write_scalar(tf, tag, value, step):
    """tf.summary.scalar without the tensorboard package (tensorflow-cpu lacks it).

    Writes the same event as tensorboard's scalar summary: a float32 tensor with
    the "scalars" plugin metadata.
    """
    from tensorflow.core.framework import summary_pb2

    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    tf.summary.write(tag, tf.constant(value, dtype=tf.float32), step=step, metadata=metadata)


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)

    if _fail_if_holds(args):
        name, op, number = args.fail_if
        print(
            f"--fail_if: {name}={getattr(args, name)} {op} {number:g}, failing on purpose",
            file=sys.stderr,
            flush=True,
        )
        return FAIL_IF_EXIT_CODE

    cluster, task_type, task_index = read_tf_config()
    if task_type == "evaluator":
        # Vertex keeps the evaluator out of the cluster spec; this trainer has no
        # side-car evaluation loop, so the evaluator just finishes.
        print("evaluator task: nothing to do, exiting", flush=True)
        return 0
    if task_type == "ps" or cluster.get("ps"):
        print("error: parameter-server clusters are not supported by this trainer", file=sys.stderr)
        return 2

    chief = is_chief(cluster, task_type, task_index)
    multi_worker = cluster_size(cluster) > 1
    # One line that shows what Vertex (or vcli) gave this replica: cluster, task, trial.
    trial = os.environ.get("CLOUD_ML_TRIAL_ID", "-")
    if cluster:
        print(f"cluster={json.dumps(cluster, sort_keys=True)} task={task_type}:{task_index} trial={trial}", flush=True)
    else:
        print(f"single replica trial={trial}", flush=True)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")

    # MultiWorkerMirroredStrategy must be created before any other TF op.
    if multi_worker:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = tf.distribute.MirroredStrategy()
    keras = tf.keras
    keras.utils.set_random_seed(args.seed)

    x_train, y_train, x_val, y_val, num_classes = load_data(args.dataset, args.seed)

    replicas = strategy.num_replicas_in_sync
    global_batch = args.batch_size * replicas
    steps_per_epoch = len(x_train) // global_batch
    if steps_per_epoch < 1:
        print(
            f"error: global batch {global_batch} is larger than the training set ({len(x_train)})",
            file=sys.stderr,
        )
        return 2

    # Every replica builds the same shuffled stream (same seed); DATA sharding gives
    # each worker its slice.  drop_remainder keeps the step count identical on all
    # replicas, otherwise the collectives hang.
    dataset = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(len(x_train), seed=args.seed, reshuffle_each_iteration=True)
        .batch(global_batch, drop_remainder=True)
        .prefetch(2)
    )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.with_options(options)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)

    with strategy.scope():
        model = build_model(keras, x_train.shape[1:], num_classes, args.num_units)
        optimizer = keras.optimizers.SGD(learning_rate=args.learning_rate, momentum=args.momentum)
        epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    # Build the optimizer's slot variables up front (inside the scope).
    with strategy.scope():
        optimizer.build(model.trainable_variables)

    def step_fn(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        # Keras 3's TF optimizer all-reduces the gradients across replicas.
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(inputs):
        per_replica = strategy.run(step_fn, args=(inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    x_val_t = tf.constant(x_val)

    @tf.function
    def predict_val():
        return tf.argmax(model(x_val_t, training=False), axis=1)

    # Output locations: chief writes to the AIP_* dirs; other replicas to temp dirs.
    model_dir = _local_path(os.environ.get("AIP_MODEL_DIR") or os.path.join(os.getcwd(), "model"))
    ckpt_dir = _local_path(os.environ.get("AIP_CHECKPOINT_DIR") or "")
    tb_dir = _local_path(os.environ.get("AIP_TENSORBOARD_LOG_DIR") or "")
    temp_dirs = []
    if not chief:
        prefix = f"trainer_{task_type}_{task_index}_"
        model_dir = tempfile.mkdtemp(prefix=prefix + "model_")
        temp_dirs.append(model_dir)
        if ckpt_dir:
            ckpt_dir = tempfile.mkdtemp(prefix=prefix + "ckpt_")
            temp_dirs.append(ckpt_dir)
        tb_dir = ""

    try:
        ckpt_manager = None
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch_var)
        if ckpt_dir:
            ckpt_manager = tf.train.CheckpointManager(checkpoint, ckpt_dir, max_to_keep=3)
        # Resume: a checkpoint already in AIP_CHECKPOINT_DIR (a restarted job, or a PBT trial
        # seeded with a better trial's checkpoint) restores the model, the optimizer's state
        # and the epoch; training goes on from the next epoch, and so do reported steps. Every
        # replica restores the same files, so the replicas start in sync. The learning rate
        # and momentum are this run's (PBT explores them), not the checkpoint's.
        restore_from = _local_path(os.environ.get("AIP_CHECKPOINT_DIR") or "")
        latest = tf.train.latest_checkpoint(restore_from) if restore_from and os.path.isdir(restore_from) else None
        if latest:
            checkpoint.restore(latest).expect_partial()
            optimizer.learning_rate.assign(args.learning_rate)
            if hasattr(optimizer, "momentum") and not callable(optimizer.momentum):
                optimizer.momentum = args.momentum
            print(f"restored {os.path.basename(latest)} (epoch {int(epoch_var.numpy())}) from {restore_from}", flush=True)
        writer = tf.summary.create_file_writer(tb_dir) if tb_dir else None
        reporter = MetricReporter() if chief else None

        val_acc = 0.0
        for epoch in range(int(epoch_var.numpy()) + 1, args.epochs + 1):
            total_loss = 0.0
            steps = 0
            for batch in dist_dataset:
                total_loss += float(train_step(batch))
                steps += 1
            mean_loss = total_loss / max(steps, 1)
            predictions = predict_val().numpy()
            val_acc = float((predictions == y_val).mean())
            epoch_var.assign(epoch)
            print(
                f"epoch {epoch}/{args.epochs} loss={mean_loss:.4f} val_accuracy={val_acc:.4f}",
                flush=True,
            )
            if ckpt_manager is not None:
                ckpt_manager.save(checkpoint_number=epoch)
            if writer is not None:
                with writer.as_default():
                    _write_scalar(tf, "loss", mean_loss, epoch)
                    _write_scalar(tf, "val_accuracy", val_acc, epoch)
                writer.flush()
            if reporter is not None:
                reporter.report(val_acc, epoch)

        # Every replica saves (it may involve collectives); only the chief's copy stays.
        _export_model(tf, model, model_dir)
        if writer is not None:
            writer.close()
    finally:
        for path in temp_dirs:
            shutil.rmtree(path, ignore_errors=True)

    if chief:
        print(f"final val_accuracy={val_acc:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
