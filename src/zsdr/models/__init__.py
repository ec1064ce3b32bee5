"""zsdr.models"""
