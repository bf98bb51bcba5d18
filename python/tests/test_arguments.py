"""Every public function of the package with each kind of bad argument: a wrong type is a TypeError naming the
argument, a right type with a bad value a ValueError naming it (as numpy and torch raise them); a value the
library refuses is a ValueError that is also a MixprecError; MixprecError alone is left for the library's
failures (a file that cannot be written)."""
import numpy as np
import pytest

import mixprec
from mixprec import MixprecError

G = np.linspace(1e-6, 1.0, 64, dtype=np.float32)
OBJ, CPLX = np.array([1.0, None]), np.ones(4, np.complex64)


def test_public_names_are_the_swept_ones():
    assert set(mixprec.__all__) == {"MixprecError", "MixprecValueError", "version", "formats", "convert", "underflow",
                                    "explore", "train", "compare"}
    assert issubclass(MixprecError, RuntimeError)
    assert issubclass(mixprec.MixprecValueError, MixprecError) and issubclass(mixprec.MixprecValueError, ValueError)


# (call, the argument's name in the message, exception type)
CASES = [
    (lambda: mixprec.convert(None, "fp16"), "x is an array of numbers, not NoneType", TypeError),
    (lambda: mixprec.convert("1.0", "fp16"), "x is an array of numbers, not str", TypeError),
    (lambda: mixprec.convert(b"1", "fp16"), "x is an array of numbers, not bytes", TypeError),
    (lambda: mixprec.convert(OBJ, "fp16"), "x is an array of real numbers, not of dtype object", TypeError),
    (lambda: mixprec.convert(CPLX, "fp16"), "x is an array of real numbers, not of dtype complex64", TypeError),
    (lambda: mixprec.convert(G, None), "fmt is a format name such as 'fp16', not NoneType", TypeError),
    (lambda: mixprec.convert(G, b"fp16"), "fmt is a format name such as 'fp16', not bytes", TypeError),
    (lambda: mixprec.convert(G, 16), "fmt is a format name such as 'fp16', not int", TypeError),
    (lambda: mixprec.convert(G, True), "fmt is a format name such as 'fp16', not bool", TypeError),
    (lambda: mixprec.convert(G, "fp7"), "fmt: unknown format 'fp7'", ValueError),
    (lambda: mixprec.convert(G, "fp16\0x"), "fmt holds a NUL character", ValueError),
    (lambda: mixprec.underflow("abc"), "values is an array of numbers, not str", TypeError),
    (lambda: mixprec.underflow(None), "values is an array of numbers, not NoneType", TypeError),
    (lambda: mixprec.underflow(OBJ), "values is an array of real numbers, not of dtype object", TypeError),
    (lambda: mixprec.underflow(CPLX), "values is an array of real numbers, not of dtype complex64", TypeError),
    (lambda: mixprec.underflow(G, formats=b"fp16"), "formats is a name or a sequence of names", TypeError),
    (lambda: mixprec.underflow(G, formats=3), "formats is a name or a sequence of names .* not int", TypeError),
    (lambda: mixprec.underflow(G, formats=None), "formats is a name or a sequence of names .* not NoneType",
     TypeError),
    (lambda: mixprec.underflow(G, formats=["fp16", b"bf16"]), "each of formats is a name .* not bytes", TypeError),
    (lambda: mixprec.underflow(G, formats=["fp16", "fp7"]), "formats: unknown format 'fp7'", ValueError),
    (lambda: mixprec.underflow(G, scales=None), "scales is a sequence of numbers, not NoneType", TypeError),
    (lambda: mixprec.underflow(G, scales=2.0), "scales is a sequence of numbers, not float", TypeError),
    (lambda: mixprec.underflow(G, scales=b"12"), "scales is a sequence of numbers, not bytes", TypeError),
    (lambda: mixprec.underflow(G, scales=[1, "2"]), "scales: each scale is a number, not str", TypeError),
    (lambda: mixprec.underflow(G, scales=[1, True]), "scales: each scale is a number, not bool", TypeError),
    (lambda: mixprec.underflow(G, scales=[1, 2j]), "scales: each scale is a number, not complex", TypeError),
    (lambda: mixprec.underflow(G, scales=[1.0, float("nan")]), "scales: each scale is finite and > 0, not nan",
     ValueError),
    (lambda: mixprec.underflow(G, scales=[float("inf")]), "scales: each scale is finite and > 0, not inf",
     ValueError),
    (lambda: mixprec.underflow(G, scales=[0]), "scales: each scale is finite and > 0, not 0.0", ValueError),
    (lambda: mixprec.underflow(G, scales=[]), "scales holds 1 to 32 loss scales, not 0", ValueError),
    (lambda: mixprec.underflow(G, scales=range(1, 34)), "scales holds 1 to 32 loss scales, not 33", ValueError),
    (lambda: mixprec.explore(OBJ, "x.html"), "values is an array of real numbers, not of dtype object", TypeError),
    (lambda: mixprec.explore(G, None), "path is a file name .*not NoneType", TypeError),
    (lambda: mixprec.explore(G, 3), "path is a file name .*not int", TypeError),
    (lambda: mixprec.explore(G, "a\0b.html"), "path holds a NUL character", ValueError),
    (lambda: mixprec.explore(G, "x.html", description=b"d"), "description is a str, not bytes", TypeError),
    (lambda: mixprec.explore(G, "x.html", description=3), "description is a str, not int", TypeError),
    (lambda: mixprec.explore(G, "x.html", description="a\0b"), "description holds a NUL character", ValueError),
    (lambda: mixprec.train(bogus=1), "^train\\(\\) got an unexpected keyword argument 'bogus'$", TypeError),
    (lambda: mixprec.train(steps=True), "steps takes a number or a name, not bool", TypeError),
    (lambda: mixprec.train(steps=b"2"), "steps takes a number or a name, not bytes", TypeError),
    (lambda: mixprec.train(steps={}), "steps takes a number or a name, not dict", TypeError),
    (lambda: mixprec.train(lr=1j), "lr takes a number or a name, not complex", TypeError),
    (lambda: mixprec.train(no_shuffle=1), "no_shuffle is a flag: True or False, not int", TypeError),
    (lambda: mixprec.train(log=3), "log is a file name .*not int", TypeError),
    (lambda: mixprec.train(data=["a", "b"]), "data is a file name .*not list", TypeError),
    (lambda: mixprec.train(steps=2.5), "--steps wants 1 .. 100000000, not '2.5'", ValueError),
    (lambda: mixprec.train(steps="abc"), "--steps wants 1 .. 100000000, not 'abc'", ValueError),
    (lambda: mixprec.train(steps=0), "--steps wants 1 .. 100000000, not '0'", ValueError),
    (lambda: mixprec.train(lr=float("nan")), r"--lr wants a number in \[0, 1e\+06\], not 'nan'", ValueError),
    (lambda: mixprec.train(lr=float("inf")), r"--lr wants a number in \[0, 1e\+06\], not 'inf'", ValueError),
    (lambda: mixprec.train(seed="1\udcff"), "seed is not valid text", ValueError),
    (lambda: mixprec.train(epochs=1, steps=2), "--epochs and --steps exclude each other", ValueError),
    (lambda: mixprec.compare(bogus=1), "^compare\\(\\) got an unexpected keyword argument 'bogus'$", TypeError),
    (lambda: mixprec.compare(precisions=3), "precisions is a name or a sequence of names .* not int", TypeError),
    (lambda: mixprec.compare(precisions=b"fp32"), "precisions is a name or a sequence .* not bytes", TypeError),
    (lambda: mixprec.compare(precisions=None), "precisions is a name or a sequence .* not NoneType", TypeError),
    (lambda: mixprec.compare(out=None), "out is a file name .*not None", TypeError),
    (lambda: mixprec.compare(checkpoints=2), "checkpoints is a flag: True or False, not int", TypeError),
    (lambda: mixprec.compare(steps=2.5), "--steps wants", ValueError),
    (lambda: mixprec.compare(log="x.csv"), "--log is set by compare itself", ValueError),
]


@pytest.mark.parametrize("call, message, kind", CASES, ids=range(len(CASES)))
def test_each_bad_argument_is_the_right_exception_naming_it(call, message, kind, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(kind, match=message) as e:
        call()
    if kind is TypeError:
        assert not isinstance(e.value, MixprecError)  # the package's check, not the library's
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_a_value_the_library_refuses_is_both_a_value_error_and_a_mixprec_error():
    for call in (lambda: mixprec.convert(G, "fp7"), lambda: mixprec.train(lr="x")):
        with pytest.raises(ValueError) as e:
            call()
        assert isinstance(e.value, MixprecError) and isinstance(e.value, RuntimeError)


def test_the_librarys_own_failures_stay_mixprec_errors(tmp_path):
    with pytest.raises(MixprecError, match="no_such_dir") as e:
        mixprec.explore(G, tmp_path / "no_such_dir" / "x.html")
    assert not isinstance(e.value, (ValueError, TypeError))


def test_integral_arguments_take_any_integral_type():
    assert mixprec.underflow(G, scales=[np.int64(2), np.uint8(4), np.float32(8)])["scales"][2]["scale"] == 8
    assert mixprec.underflow(G, formats=("fp16",)) == {"fp16": mixprec.underflow(G, "fp16")}
    assert mixprec.underflow(G, formats=iter(["bf16"]))["bf16"]["format"] == "bf16"


def monitor_cases():
    torch = pytest.importorskip("torch")
    from mixprec.torch import Monitor

    def mlp():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 3))

    def stepped():
        """A monitor after one recorded step, for report()."""
        m = mlp()
        mon = Monitor(m, every=1)
        m(torch.ones(2, 4)).sum().backward()
        mon.after_backward(1.0)
        mon.after_step(1.0)
        return mon

    def backward(**kw):
        m = mlp()
        mon = Monitor(m, every=1)
        m(torch.ones(2, 4)).sum().backward()
        kw.setdefault("scaler", 1.0)
        mon.after_backward(**kw)

    def after_step(scaler):
        m = mlp()
        mon = Monitor(m, every=1)
        m(torch.ones(2, 4)).sum().backward()
        mon.after_backward(1.0)
        mon.after_step(scaler)
    return Monitor, mlp, stepped, backward, after_step, torch


def test_monitor_and_its_methods_refuse_bad_arguments_by_name(tmp_path):
    Monitor, mlp, stepped, backward, after_step, torch = monitor_cases()
    cases = [
        (lambda: Monitor(None), r"Monitor watches a torch.nn.Module \(model\), not NoneType", TypeError),
        (lambda: Monitor(mlp(), formats=b"fp16"), "formats is a name or a sequence of names .* not bytes", TypeError),
        (lambda: Monitor(mlp(), formats=3), "formats is a name or a sequence of names .* not int", TypeError),
        (lambda: Monitor(mlp(), formats=None), "formats is a name or a sequence .* not NoneType", TypeError),
        (lambda: Monitor(mlp(), formats=[b"fp16"]), "each of formats is a name .* not bytes", TypeError),
        (lambda: Monitor(mlp(), formats=()), r"at least one format \(formats is empty\)", ValueError),
        (lambda: Monitor(mlp(), formats="fp7"), "formats: unknown format 'fp7'", ValueError),
        (lambda: Monitor(mlp(), formats=["fp16\0"]), "each of formats holds a NUL character", ValueError),
        (lambda: Monitor(mlp(), formats="e8m0"), "formats: Monitor counts .* not e8m0", ValueError),
        (lambda: Monitor(mlp(), every=2.0), "every is an integer, not float", TypeError),
        (lambda: Monitor(mlp(), every=True), "every is an integer, not bool", TypeError),
        (lambda: Monitor(mlp(), every="2"), "every is an integer, not str", TypeError),
        (lambda: Monitor(mlp(), every=None), "every is an integer, not NoneType", TypeError),
        (lambda: Monitor(mlp(), every=np.int64(0)), "every must be an integer >= 1, not 0", ValueError),
        (lambda: Monitor(mlp(), shadow="yes"), "shadow is True or False, not str", TypeError),
        (lambda: Monitor(mlp(), counts=None), "counts is \"auto\" or \"torch\", not NoneType", TypeError),
        (lambda: Monitor(mlp(), counts="gpu"), "counts is \"auto\" or \"torch\", not 'gpu'", ValueError),
        (lambda: Monitor(mlp(), group="world"), "group is a torch.distributed process group, None .* not str", TypeError),
        (lambda: Monitor(mlp(), group=True), "group is a torch.distributed process group, None .* not bool", TypeError),
        (lambda: Monitor(mlp().half(), shadow=True), "shadow=True .* needs fp32 parameters; 0.weight is torch.float16",
         ValueError),
        (lambda: backward(scaler="abc"), "after_backward's scaler takes a GradScaler or a number .* not str",
         TypeError),
        (lambda: backward(scaler=None), "after_backward's scaler takes .* not NoneType", TypeError),
        (lambda: backward(scaler=True), "after_backward's scaler takes .* not bool", TypeError),
        (lambda: backward(scaler=float("nan")), "after_backward's scaler: the loss scale must be finite and > 0, "
                                                "not nan", ValueError),
        (lambda: backward(scaler=0), "after_backward's scaler: the loss scale must be finite and > 0", ValueError),
        (lambda: backward(loss="0.5"), "after_backward's loss is a number or a one-element tensor, not str",
         TypeError),
        (lambda: backward(loss=torch.ones(2)), "after_backward's loss is .* not a torch.float32 tensor of 2 elements",
         TypeError),
        (lambda: backward(optimizer=3), "after_backward's optimizer is a torch.optim.Optimizer, not int", TypeError),
        (lambda: after_step("abc"), "after_step's scaler takes a GradScaler or a number .* not str", TypeError),
        (lambda: after_step(-1.0), "after_step's scaler: the loss scale must be finite and > 0, not -1.0",
         ValueError),
        (lambda: stepped().report(None), "path is a file name .*not NoneType", TypeError),
        (lambda: stepped().report(3), "path is a file name .*not int", TypeError),
        (lambda: stepped().report(tmp_path / "r.html", title=b"t"), "report's title is a str, not bytes", TypeError),
        (lambda: stepped().report(tmp_path / "r.html", title="a\0b"), "report's title holds a NUL", ValueError),
    ]
    for call, message, kind in cases:
        with pytest.raises(kind, match=message) as e:
            call()
        if kind is TypeError:
            assert not isinstance(e.value, MixprecError), message
    assert list(tmp_path.iterdir()) == []
    # any integral number is an integer; a tensor or numpy number a loss and a scale
    assert Monitor(mlp(), every=np.int64(2)).every == 2 and type(Monitor(mlp(), every=np.uint8(3)).every) is int
    backward(scaler=np.float32(4), loss=torch.tensor(0.25))
    backward(scaler=torch.tensor(8.0), loss=np.float64(0.5))
