package cdc.py4j

import java.net.URLClassLoader
import java.util.{Collections, WeakHashMap}
import java.util.concurrent.ConcurrentHashMap

import py4j.reflection.ClassLoadingStrategy

/** py4j's class lookups, with the names that are no class remembered per class loader.
 *
 *  Why: PySpark reaches a Java class by walking `jvm.a.b.C` one segment at a time (`a`, `a.b`, then `a.b.C`) and a
 *  short name through each of the gateway's imports in turn, so most names it asks about are not classes, and each
 *  such miss walks every jar on the class path: 3% of a test session JVM's samples in a profile of the whole suite.
 *  A miss is remembered until the loader it was asked of gains a jar (`ADD JAR`, a URL added to Spark's loader), so a
 *  class that becomes loadable is found. */
final class RememberedClassMisses(delegate: ClassLoadingStrategy) extends ClassLoadingStrategy {
  // loader -> name -> how many URLs the loader had when the name missed; weak: a dropped loader goes with its misses
  private val misses = Collections.synchronizedMap(new WeakHashMap[ClassLoader, ConcurrentHashMap[String, Integer]]())

  override def classForName(name: String): Class[_] = {
    val loader = getClassLoader
    val urls = RememberedClassMisses.urls(loader)
    val known = misses.computeIfAbsent(loader, _ => new ConcurrentHashMap[String, Integer]())
    if (known.get(name) == urls) throw new ClassNotFoundException(name)
    try delegate.classForName(name)
    catch {
      case missed: ClassNotFoundException =>
        known.put(name, urls)
        throw missed
    }
  }

  override def getClassLoader: ClassLoader = delegate.getClassLoader

  /** Whether `name` is remembered as no class of `loader`, as the loader reads now. */
  def remembers(loader: ClassLoader, name: String): Boolean =
    Option(misses.get(loader)).exists(known => known.get(name) == RememberedClassMisses.urls(loader))
}

object RememberedClassMisses {
  /** The number of URLs a loader reads from (-1 for a loader that does not say): a new jar changes it. */
  private def urls(loader: ClassLoader): Integer = loader match {
    case urls: URLClassLoader => urls.getURLs.length
    case _ => -1
  }
}
