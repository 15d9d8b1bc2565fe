"""A tiny MJCF rig with one joint per actuator kind, for the actuator component tests.

No contacts; every joint is independent. The first actuator is an unbound dcmotor with three
controls (`input="pos vel ff"`), so every later actuator's control index differs from its
actuator index (`actuator_ctrladr` must be used).
"""

from __future__ import annotations

import pathlib
import textwrap

from ref_helpers import write_manifest

RIG_XML = textwrap.dedent("""\
    <mujoco model="actuator_rig">
      <compiler angle="radian"/>
      <option timestep="0.002" integrator="implicitfast"/>
      <include file="package://fibril_sim_models/mujoco/actuator_presets.xml"/>
      <default>
        <geom contype="0" conaffinity="0"/>
        <joint damping="0.05"/>
      </default>
      <worldbody>
        <body name="b_spare"><joint name="j_spare" type="hinge" axis="0 0 1"/>
          <geom type="sphere" size="0.05" mass="0.5"/></body>
        <body name="b_sc" pos="1 0 0"><joint name="j_sc" type="slide" axis="1 0 0"/>
          <geom type="sphere" size="0.05" mass="1"/></body>
        <body name="b_pos" pos="2 0 0"><joint name="j_pos" type="hinge" axis="0 0 1"/>
          <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/></body>
        <body name="b_vel" pos="3 0 0"><joint name="j_vel" type="hinge" axis="0 0 1"/>
          <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/></body>
        <body name="b_eff" pos="4 0 0"><joint name="j_eff" type="slide" axis="1 0 0"/>
          <geom type="sphere" size="0.05" mass="2"/></body>
        <body name="b_mm" pos="5 0 0"><joint name="j_mm" type="hinge" axis="0 1 0"
            actuatorfrcrange="-3 3"/>
          <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.02" mass="1"/></body>
        <body name="b_dc" pos="6 0 0"><joint name="j_dc" type="hinge" axis="0 0 1"/>
          <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/></body>
      </worldbody>
      <actuator>
        <dcmotor name="spare" joint="j_spare" resistance="2" motorconst="0.1" input="pos vel ff"
                 controller="1 0 0.1"/>
        <motor name="a_sc" joint="j_sc"/>
        <position name="a_pos" joint="j_pos" kp="30" kv="2"/>
        <velocity name="a_vel" joint="j_vel" kv="3"/>
        <motor name="a_eff" joint="j_eff" gear="1"/>
        <position name="mm_p" class="fibril_sim_hw_robstride_operation_position" joint="j_mm"/>
        <velocity name="mm_v" class="fibril_sim_hw_robstride_operation_velocity" joint="j_mm"/>
        <motor name="mm_f" class="fibril_sim_hw_robstride_operation_feedforward" joint="j_mm"/>
        <dcmotor name="a_dc" class="fibril_sim_hw_robomaster_m2006_p36_nominal" joint="j_dc"
                 input="vel" controller="0 0 0.05" saturation="0 10 0"/>
      </actuator>
    </mujoco>
    """)

DT = 0.002


def write(tmp: pathlib.Path, components, *, extra=None, xml=RIG_XML) -> pathlib.Path:
  """Writes rig.xml and manifest.yaml into `tmp`; returns the manifest path."""
  return write_manifest(tmp, xml, components, model='rig.xml', **(extra or {}))


def motor(cid, actuator, **config):
  return {'id': cid, 'type': 'fibril_sim/motor',
          'config': {'actuator': actuator, 'application_period_s': DT, **config}}


def scalar(cid, actuator, **config):
  return {'id': cid, 'type': 'fibril_sim/scalar_actuator',
          'config': {'actuator': actuator, **config}}


def motion(cid, **config):
  return {'id': cid, 'type': 'fibril_sim/motion_motor',
          'config': {'joint': 'j_mm', 'position_actuator': 'mm_p', 'velocity_actuator': 'mm_v',
                     'feedforward_actuator': 'mm_f', 'application_period_s': DT, **config}}
