"""py4j's class lookups through jvm/cdc's `cdc.py4j.RememberedClassMisses`, which remembers the names that are no class.

PySpark reaches a Java class by walking `jvm.a.b.C` one segment at a time and a short name through each of the
gateway's imports, so most names the JVM is asked about are not classes, and each such miss walks every jar on the
class path: 3% of a test session JVM's samples in a profile of the whole suite (docs/testing.md). A miss is
remembered until the class loader it was asked of gains a jar.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STRATEGY = "cdc.py4j.RememberedClassMisses"


def remember_class_misses(spark: SparkSession) -> None:
    """Put the strategy in front of py4j's own, once per JVM; needs jvm/cdc's jar on the driver."""
    from tables.lake import java_class

    reflection = java_class(spark, "py4j.reflection.ReflectionUtil")
    current = reflection.getClassLoadingStrategy()
    if current.getClass().getName() != STRATEGY:
        reflection.setClassLoadingStrategy(java_class(spark, STRATEGY)(current))
