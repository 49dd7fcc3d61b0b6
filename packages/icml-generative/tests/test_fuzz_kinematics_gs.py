"""The bad-input contract (GUIDE "Bad input") for icml_generative.kinematics_gs: one fuzz test per public API.

Every case either returns a result its check verifies, or raises ValueError/TypeError naming the argument.
Tiny inputs: 3 Gaussians, 6x5 images, ``KinematicsGS(3, hidden=8)``, two training steps.
"""

import copy
import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import icml_generative.kinematics_gs as kinematics_gs_module
from icml_generative.kinematics_gs import (
    BLUR_MODES,
    KinematicsGS,
    TrainConfig,
    TrainLog,
    covariance_from_rotation,
    intrinsics,
    look_at,
    naive_rasterization,
    photometric_loss,
    project_gaussians,
    quat_scale_to_covar,
    quat_to_rotmat,
    rasterization,
    rotmat_to_quat,
    train_kinematics_gs,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(TrainLog, "a result container only train_kinematics_gs builds")
FUZZ.exempt(BLUR_MODES, "a constant (the modes KinematicsGS's blur takes), fuzzed through KinematicsGS")

W, H = 6, 5
G = torch.Generator().manual_seed(0)
MEANS = torch.tensor([[0.0, 0.0, 0.0], [0.3, -0.2, 0.4], [-0.3, 0.2, -0.2]])
_Q = torch.randn(3, 4, generator=G)
QUATS = _Q / _Q.norm(dim=-1, keepdim=True)
SCALES = torch.rand(3, 3, generator=G) * 0.2 + 0.1
OPACITIES = torch.tensor([0.5, 0.7, 0.9])
COLORS = torch.rand(3, 3, generator=G)
ROTATIONS = quat_to_rotmat(QUATS)
COVARS = quat_scale_to_covar(QUATS, SCALES)
VIEWMAT = look_at((0.2, -0.1, -2.5), (0.0, 0.0, 0.0)).float()
K = intrinsics(W, H, 50.0).float()
BACKGROUND = torch.tensor([0.1, 0.2, 0.3])
MOTION = 0.1 * torch.randn(3, 4, 3, generator=G)
TIMES = torch.tensor([0.0, 0.25, 0.5, 0.75])
IMAGES = torch.rand(2, H, W, 3, generator=G)
RENDER = torch.rand(H, W, 3, generator=G)
SMALL_INTS = st.one_of(  # hostile sizes and step counts without long valid runs (slow, not bad input)
    st.sampled_from([None, "x", object(), 0, -1, True, 2.0, 0.5, math.nan, 2**63, 10_000_001]),
    st.integers(-3, 3),
)
OTHER_MODELS = st.sampled_from([None, "x", torch.nn.Linear(2, 2), KinematicsGS(3, hidden=8, channels=1)])


def tiny_model(blur: str = "kinematic", motion_aligned: bool = True) -> KinematicsGS:
    """Three moving Gaussians in front of the camera, the field's and the per-Gaussian motion both on."""
    torch.manual_seed(0)
    model = KinematicsGS(3, hidden=8, blur=blur, exposure=0.1, subframes=2, motion_aligned=motion_aligned)
    model.initialize(MEANS, colors=COLORS.clamp(0.05, 0.95), scale=0.15, motion=MOTION)
    with torch.no_grad():
        assert model.field is not None
        for p in model.field.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    model.stage.fill_(2)
    return model.eval()


MODELS = {mode: tiny_model(mode) for mode in BLUR_MODES}
MODEL = MODELS["kinematic"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # one torch thread for this module (root conftest)


def shaped(t, shape):
    return isinstance(t, torch.Tensor) and tuple(t.shape) == shape


def finite(t):
    return isinstance(t, torch.Tensor) and bool(torch.isfinite(t).all())


def blur_adds_variance(out):
    """``Σ_blur − Σ`` is positive semidefinite (to float32 rounding of ``Σ_blur``)."""
    _, sigma, blurred = (x.detach().double() for x in out)
    eig = torch.linalg.eigvalsh(blurred - sigma)
    return bool((eig >= -1e-5 * blurred.abs().amax((-2, -1))[:, None]).all())


# ------------------------------------------------------------------------------------------- geometry
@FUZZ.covers(quat_to_rotmat, rotmat_to_quat)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_quaternions(data):
    fuzz_call(
        data,
        quat_to_rotmat,
        {"quats": QUATS},
        check=lambda R: R.shape[-2:] == (3, 3) and finite(R),
    )
    fuzz_call(
        data,
        rotmat_to_quat,
        {"rotations": ROTATIONS},
        check=lambda q: (
            q.shape[-1] == 4
            and finite(q)
            and bool(torch.allclose(q.double().norm(dim=-1), torch.ones(()).double(), atol=1e-2))
        ),
    )


@FUZZ.covers(covariance_from_rotation, quat_scale_to_covar)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_covariances(data):
    fuzz_call(
        data,
        covariance_from_rotation,
        {"rotations": ROTATIONS, "scales": SCALES},
        check=lambda c: c.shape[-2:] == (3, 3) and finite(c),
        related={"rotations": ["scales"], "scales": ["rotations"]},
    )
    fuzz_call(
        data,
        quat_scale_to_covar,
        {"quats": QUATS, "scales": SCALES},
        check=lambda c: c.shape[-2:] == (3, 3) and finite(c),
        related={"quats": ["scales"], "scales": ["quats"]},
    )


@FUZZ.covers(look_at, intrinsics)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_cameras(data):
    def rotation_and_translation(m):
        R = m[:3, :3]
        return (
            shaped(m, (4, 4))
            and finite(m)
            and bool(torch.allclose(R @ R.T, torch.eye(4, dtype=m.dtype)[:3, :3], atol=1e-9))
        )

    fuzz_call(
        data,
        look_at,
        {"eye": (0.2, -0.1, -2.5), "target": (0.0, 0.0, 0.0), "up": (0.0, -1.0, 0.0)},
        check=rotation_and_translation,
        related={"eye": ["target"], "target": ["eye"]},
        strategies={
            "eye": st.sampled_from(
                [None, "x", (), (0.0, 0.0), (1.0, 2.0, 3.0, 4.0), (math.nan, 0, 0), (0, 0, 0)]
            ),
            "up": st.sampled_from(
                [None, "x", (0.0, 0.0), (0.0, 0.0, 0.0), (0.2, -0.1, -2.5), (math.inf, 0, 0)]
            ),
        },
    )
    fuzz_call(
        data,
        look_at,
        {
            "eye": torch.tensor([0.2, -0.1, -2.5]),
            "target": torch.zeros(3),
            "up": torch.tensor([0.0, -1.0, 0.0]),
        },
        check=rotation_and_translation,
        related={"eye": ["target", "up"], "target": ["eye", "up"], "up": ["eye", "target"]},
    )
    fuzz_call(
        data,
        intrinsics,
        {"width": W, "height": H, "fov_degrees": 50.0},
        check=lambda k: shaped(k, (3, 3)) and finite(k) and bool(k[0, 0] > 0),
    )


# ----------------------------------------------------------------------------------------- rendering
@FUZZ.covers(project_gaussians)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_project_gaussians(data):
    def projected(out):
        means2d, cov2d, depths = out
        n = means2d.shape[0]
        return shaped(means2d, (n, 2)) and shaped(cov2d, (n, 2, 2)) and shaped(depths, (n,))

    fuzz_call(
        data,
        project_gaussians,
        {"means": MEANS, "covars": COVARS, "viewmat": VIEWMAT, "K": K, "width": W, "height": H, "eps2d": 0.3},
        check=projected,
        related={"means": ["covars"], "covars": ["means"]},
    )


GAUSSIANS = {"means": MEANS, "opacities": OPACITIES, "colors": COLORS}
AGREE = {  # arguments whose N (or D) must agree
    "means": ["quats", "scales", "opacities", "colors", "covars"],
    "colors": ["backgrounds"],
    "viewmats": ["Ks"],
    "Ks": ["viewmats"],
}


@FUZZ.covers(rasterization)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_rasterization(data):
    def rendered(out):
        image, alpha, meta = out
        return (
            image.ndim == 4
            and image.shape[0] == 1
            and shaped(alpha, (*image.shape[:3], 1))
            and bool(((alpha >= 0) & (alpha <= 1)).all())
            and len(meta["means2d"]) == 1
        )

    fuzz_call(
        data,
        rasterization,
        {
            **GAUSSIANS,
            "quats": QUATS,
            "scales": SCALES,
            "viewmats": VIEWMAT[None],
            "Ks": K[None],
            "width": W,
            "height": H,
            "near_plane": 0.01,
            "eps2d": 0.3,
            "covars": None,
            "backgrounds": BACKGROUND,
        },
        check=rendered,
        related=AGREE,
        strategies={"width": SMALL_INTS, "height": SMALL_INTS},
    )
    fuzz_call(
        data,
        rasterization,
        {
            **GAUSSIANS,
            "quats": None,
            "scales": None,
            "covars": COVARS,
            "viewmats": VIEWMAT[None],
            "Ks": K[None],
            "width": W,
            "height": H,
            "backgrounds": None,
        },
        check=rendered,
        related=AGREE,
        mutate=["means", "covars", "opacities", "colors", "backgrounds"],
    )


@FUZZ.covers(naive_rasterization)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_naive_rasterization(data):
    fuzz_call(
        data,
        naive_rasterization,
        {
            **GAUSSIANS,
            "covars": COVARS,
            "viewmat": VIEWMAT,
            "K": K,
            "width": W,
            "height": H,
            "near_plane": 0.01,
            "eps2d": 0.3,
            "background": BACKGROUND,
        },
        check=lambda image: (
            image.ndim == 3 and image.shape[2] == COLORS.shape[1] and bool((image == image).all())
        ),
        related={**AGREE, "colors": ["background"], "means": ["covars", "opacities", "colors"]},
        strategies={"width": SMALL_INTS, "height": SMALL_INTS},
    )


# -------------------------------------------------------------------------------------------- model
@FUZZ.covers(KinematicsGS)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_kinematics_gs(data):
    fuzz_call(
        data,
        KinematicsGS,
        {
            "n": 3,
            "frequencies": 2,
            "hidden": 8,
            "blur": "kinematic",
            "exposure": 0.1,
            "subframes": 2,
            "motion_aligned": True,
            "channels": 3,
        },
        check=lambda m: isinstance(m, KinematicsGS) and m.means.shape[1] == 3,
        strategies={
            "n": SMALL_INTS,
            "frequencies": SMALL_INTS,
            "hidden": SMALL_INTS,
            "subframes": SMALL_INTS,
        },
    )
    model = KinematicsGS(3, hidden=8)
    result = fuzz_call(
        data,
        model.initialize,
        {"points": MEANS, "colors": COLORS, "scale": 0.15, "motion": MOTION},
        check=lambda out: out is None,
    )
    if result is None:  # initialised: every parameter is finite, the scales positive
        assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
        assert finite(model.scales()) and bool((model.scales() > 0).all())
    fuzz_call(
        data,
        KinematicsGS(3, hidden=8).initialize,
        {"points": MEANS, "colors": None, "scale": None, "motion": None},
        check=lambda out: out is None,
    )


@FUZZ.covers(KinematicsGS)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_kinematics_gs_deformation(data):
    fuzz_call(data, MODEL.positions, {"t": 0.3}, check=lambda p: shaped(p, (3, 3)) and finite(p))
    fuzz_call(data, MODEL.velocities, {"t": 0.3}, check=lambda v: shaped(v, (3, 3)) and finite(v))
    fuzz_call(
        data,
        MODEL.deformation_variance,
        {"times": TIMES},
        check=lambda v: shaped(v, (3,)) and bool((v >= 0).all()),
    )
    model = copy.deepcopy(MODEL)
    fuzz_call(
        data,
        model.split_static_dynamic,
        {"times": TIMES, "threshold": 1e-3},
        check=lambda d: shaped(d, (3,)) and d.dtype == torch.bool,
    )
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


@FUZZ.covers(KinematicsGS)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_kinematics_gs_shapes(data):
    velocities = MODEL.velocities(0.3).detach()

    def frames_of(out):
        frames, moving = out
        eye = torch.eye(3).expand(3, 3, 3)
        return (
            shaped(frames, (3, 3, 3))
            and shaped(moving, (3,))
            and bool(torch.allclose(frames.transpose(1, 2) @ frames, eye, atol=1e-5))
        )

    fuzz_call(data, MODEL.motion_frames, {"velocities": velocities}, check=frames_of)
    fuzz_call(
        data, MODEL.rotations, {"velocities": velocities}, check=lambda R: shaped(R, (3, 3, 3)) and finite(R)
    )
    fuzz_call(
        data,
        MODEL.covariances,
        {"t": 0.3},
        check=lambda out: shaped(out[0], (3, 3)) and shaped(out[1], (3, 3, 3)) and shaped(out[2], (3, 3)),
    )
    fuzz_call(
        data,
        MODEL.blur_covariances,
        {"t": 0.3, "exposure": 0.05},
        check=lambda out: shaped(out[2], (3, 3, 3)) and blur_adds_variance(out),
    )


@FUZZ.covers(KinematicsGS)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_kinematics_gs_render(data):
    model = MODELS[data.draw(st.sampled_from(BLUR_MODES), label="blur")]
    fuzz_call(
        data,
        model.render,
        {
            "viewmat": VIEWMAT,
            "K": K,
            "t": 0.3,
            "width": W,
            "height": H,
            "sharp": False,
            "background": BACKGROUND,
        },
        check=lambda image: image.shape[-1] == 3 and image.ndim == 3 and finite(image),
        strategies={"width": SMALL_INTS, "height": SMALL_INTS},
    )


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("kinematics_gs")
    MODEL.save(root / "saved")
    (root / "file.txt").write_text("not a model")
    (root / "other").mkdir()
    (root / "other" / "notes.txt").write_text("keep me")
    damaged = root / "damaged"
    MODEL.save(damaged)
    (damaged / "config.json").write_text("{not json")
    truncated = root / "truncated"
    MODEL.save(truncated)
    (truncated / "model.safetensors").write_bytes(b"\x08\x00\x00")
    return root


@FUZZ.covers(KinematicsGS)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_kinematics_gs_save_and_load(data, folders):
    root = folders

    def round_trips(loaded):
        return loaded.config() == MODEL.config() and all(
            torch.equal(a, b)
            for a, b in zip(loaded.state_dict().values(), MODEL.state_dict().values(), strict=True)
        )

    def save_and_load(path):
        MODEL.save(path)
        return KinematicsGS.load(path)

    bad = [None, 3, b"x", object(), "", str(root / "file.txt"), root / "other"]
    fuzz_call(
        data,
        save_and_load,
        {"path": str(root / "again")},
        check=round_trips,
        strategies={"path": st.sampled_from(bad)},
    )
    fuzz_call(
        data,
        KinematicsGS.load,
        {"path": root / "saved"},
        check=round_trips,
        strategies={"path": st.sampled_from([*bad, root / "missing", root / "damaged", root / "truncated"])},
    )
    assert (root / "file.txt").read_text() == "not a model"  # a refused save leaves what was there
    assert (root / "other" / "notes.txt").read_text() == "keep me"


# ----------------------------------------------------------------------------------------- training
@FUZZ.covers(TrainConfig)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_train_config(data):
    fuzz_call(
        data,
        TrainConfig,
        dataclasses.asdict(TrainConfig(steps=2, split_at=0.5)),
        check=lambda c: isinstance(c, TrainConfig),
        strategies={"steps": SMALL_INTS, "seed": SMALL_INTS},
    )


@FUZZ.covers(photometric_loss)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_photometric_loss(data):
    fuzz_call(
        data,
        photometric_loss,
        {"render": RENDER, "target": IMAGES[0], "ssim_weight": 0.2},
        check=lambda loss: shaped(loss, ()) and finite(loss) and float(loss) >= 0,
        related={"render": ["target"], "target": ["render"]},
    )


@FUZZ.covers(train_kinematics_gs)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_train_kinematics_gs(data):
    model = KinematicsGS(3, hidden=8, exposure=0.1)
    model.initialize(MEANS, scale=0.15, motion=MOTION)
    fuzz_call(
        data,
        train_kinematics_gs,
        {
            "model": model,
            "images": IMAGES,
            "viewmats": VIEWMAT.expand(2, 4, 4).clone(),
            "Ks": K.expand(2, 3, 3).clone(),
            "times": torch.tensor([0.0, 0.5]),
            "config": TrainConfig(steps=2, split_at=0.5),
            "background": None,
        },
        check=lambda log: (
            isinstance(log, TrainLog)
            and len(log.loss) == 2
            and all(math.isfinite(x) for x in log.loss)
            and not model.training
        ),
        related={
            "images": ["viewmats", "Ks", "times"],
            "model": ["images"],
            "viewmats": ["Ks"],
            "Ks": ["viewmats"],
        },
        strategies={"model": OTHER_MODELS, "config": st.sampled_from(["x", object(), {}, TrainConfig])},
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(kinematics_gs_module)
